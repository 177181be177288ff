"""The batch pipeline of ``physid process``: find experiments, synchronize, fuse, identify,
report; plus the sample experiments and synthetic identification runs."""

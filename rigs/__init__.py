"""Rigs: models built from specs, encoder board I/O, the batch pipeline and the command line.

Floors, lowest first (a module imports only from its own floor or below): ``encoders`` (the
serial board, logs), ``models`` (what each rig model simulates and identifies), ``pipeline``
(experiments of a folder, clock sync, video fusion, the batch run), ``cli``.
"""

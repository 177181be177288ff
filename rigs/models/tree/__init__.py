"""Rigs described without code: kinematic trees from a spec's TOML tables or from an MJCF or
URDF file it points to (docs/newton-euler.md), and ``physid simulate`` for them."""

"""Rig models built from specs: what each ``[rig] model`` simulates and how it is identified."""

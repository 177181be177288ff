"""JAX's persistent compilation cache (``identify_hinged.enable_compilation_cache``): on by
default for ``physid identify`` / ``physid.identify``; ``PHYSID_JAX_CACHE`` moves it or, set
to ``off``, leaves it off."""

from __future__ import annotations

import jax

from physid.rigs.models.identify_hinged import enable_compilation_cache


def test_off_leaves_the_cache_off(monkeypatch, tmp_path):
    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("PHYSID_JAX_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path))  # the default folder, were it used
    assert enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir == before
    assert not any(tmp_path.iterdir())  # nothing written

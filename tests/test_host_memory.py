"""The server's allocator settings: an operator's MALLOC_* variables win over them."""

from __future__ import annotations

from longqa_core import host_memory


def test_the_environment_s_malloc_settings_leave_the_allocator_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "16")
    assert host_memory.tune_allocator() == {}


"""Dynamic batching: turns on the engine's out-of-memory back-off for a profile.
Only flips `EngineSettings.adaptive_batching`; the back-off loop itself is the engine's
(`longqa_core.batching.run_windows`).
"""

from __future__ import annotations

from strategies.base import RUNTIME, Strategy, replace_settings


class DynamicBatching(Strategy):
    """Run windows in batches and halve the batch on out-of-memory instead of failing.

    Saves: failed requests: a batch that does not fit is retried at half size without recomputing finished
        windows, and the size that worked is remembered for the next request.
    Costs: the time of the failed attempt (once per model and size); smaller batches are slower per window.
    Requires: nothing (useful wherever memory is tight; simulated OOM in tests).
    """

    name = "dynamic_batching"
    description = "Batch windows; on out-of-memory halve the batch, keep finished windows, remember the size."
    phase = RUNTIME

    def adjust_settings(self, settings):
        return replace_settings(settings, adaptive_batching=True)

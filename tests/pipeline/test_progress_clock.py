"""The progress view's clock keeps moving through every stage, and stops when a run ends."""

import io

from rich.console import Console

from physid.rigs.pipeline.experiments import Experiment
from physid.rigs.pipeline.process import StageClock, _ProgressView


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _shown(view: _ProgressView) -> str:
    return StageClock().render(view.progress.tasks[0]).plain


def test_clock_moves_after_a_bar_fills_and_freezes_when_done(tmp_path):
    clock = Clock()
    view = _ProgressView([Experiment("furuta", tmp_path)], Console(file=io.StringIO()), clock)
    with view:
        assert _shown(view) == "-:--:--"  # queued: not started
        view.event((0, {"experiment": "furuta", "stage": "tracking", "message": "stage tracking"}))
        clock.now += 30
        # the last frame completes the bar (rich's own elapsed time would stop here)
        view.event((0, {"experiment": "furuta", "stage": "tracking", "frames": 600, "total": 600}))
        clock.now += 5
        view.event((0, {"experiment": "furuta", "stage": "identify", "message": "iteration 1"}))
        clock.now += 125  # minutes of identification without an event
        assert _shown(view) == "0:02:40 (0:02:05 in identify)"
        assert view.progress.tasks[0].total is None  # the new stage starts an empty bar
        view.done("furuta", {"status": "ok"})
        clock.now += 60
        assert _shown(view) == "0:02:40"

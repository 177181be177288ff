"""The exit status of ``physid process`` and ``physid identify`` from the experiments'
summaries (issue 24: a failure never reads as a success, to a script either)."""

from physid.rigs.pipeline.process import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNTRUSTED,
    exit_status,
    untrusted,
)


def _summary(status="ok", converged=True, verdict="good fit", name="pendulum"):
    return {"experiment": name, "status": status, "converged": converged, "verdict": verdict}


def test_every_good_fit_reported_is_success():
    assert exit_status([_summary(), _summary(status="warning", name="furuta")]) == EXIT_OK


def test_a_failed_or_missing_experiment_is_a_failure_whatever_the_others_verdicts():
    assert exit_status([]) == EXIT_FAILED
    failed = {"experiment": "drop", "status": "failed"}
    assert exit_status([_summary(verdict="poor fit"), failed]) == EXIT_FAILED


def test_a_reported_fit_that_is_not_trusted_has_its_own_status():
    assert exit_status([_summary(), _summary(verdict="poor fit", name="drop")]) == EXIT_UNTRUSTED
    assert untrusted(_summary(verdict="poor fit")) == "poor fit"
    # Not converged counts whatever the verdict says (a reused report from before verdicts).
    assert untrusted(_summary(converged=False, verdict=None)) == "not converged"
    assert exit_status([_summary(converged=False, verdict="not converged")]) == EXIT_UNTRUSTED


def test_a_report_without_a_prediction_check_counts_by_its_convergence():
    assert untrusted(_summary(verdict=None)) is None
    assert exit_status([_summary(verdict=None)]) == EXIT_OK

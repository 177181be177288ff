"""The verdict of a fit, from its checks (issue 24): one word for the banner, the terminal and
``estimate.json``, and the reasons behind it.

- "not converged": no convergence test passed (``Status``); nothing else is trusted.
- "poor fit": some prediction check (``estimation.prediction``: k-step-ahead or free run, on
  the fitted or on held-out data) has an RMS error above ``POOR_FIT`` times the sensor noise
  on some channel, or, where the check knows what a correct model scores on this motion
  (``Prediction.expected``: a motion that amplifies the state's noise), above ``POOR_FIT``
  times that.
- "good fit": otherwise. Parameters flagged not identifiable and residual findings are
  listed with it; they do not change the word (a good fit can leave a parameter
  unidentified: the data do not excite it, yet the model predicts them).
"""

from __future__ import annotations

from physid.estimation.estimate import ParameterEstimate, Status
from physid.estimation.prediction import POOR_FIT, Prediction

GOOD, POOR, NOT_CONVERGED = "good fit", "poor fit", "not converged"


def validation(
    status: Status,
    predictions: list[Prediction],
    parameters: dict[str, ParameterEstimate],
    residuals: dict | None = None,
    std_covers: str = "",
    extra: dict | None = None,
) -> dict:
    """``Estimate.validation``: verdict, its reasons, a one-line summary, the prediction
    checks (``Prediction.to_dict``), residual checks, flagged parameters and the sentence
    saying what the reported std covers."""
    reasons = []
    if not status.converged:
        word = NOT_CONVERGED
        reasons.append(f"no convergence test passed ({status.result.value}: {status.stop})")
    else:
        word = GOOD
    for p in predictions:
        for c, ratio, limit in zip(p.channels, p.ratio, p.limit, strict=True):
            if ratio > limit:
                correct = limit / POOR_FIT  # what a correct model scores, at least 1
                beyond = "" if correct <= 1.0 else (
                    f", above {POOR_FIT:g} × the {correct:.2g} × a correct model scores on "
                    "this motion")  # fmt: skip
                reasons.append(
                    f"{p.kind} on {p.label}: {c.name} RMS {ratio:.1f} × its noise "
                    f"({c.noise:.3g} {c.unit}){beyond}"
                )
    if word == GOOD and any(p.poor for p in predictions):
        word = POOR
    if not predictions:
        reasons.append("no prediction check was possible")
    flagged = {k: p.reason for k, p in parameters.items() if not p.identifiable}
    return {
        "verdict": word,
        "summary": summary(word, predictions, flagged),
        "reasons": reasons,
        "poor_fit_factor": POOR_FIT,
        "predictions": [p.to_dict() for p in predictions],
        "residuals": residuals or {},
        "not_identifiable": flagged,
        "std_covers": std_covers,
        **(extra or {}),
    }


def summary(word: str, predictions: list[Prediction], flagged: dict) -> str:
    """One line: the verdict, the worst prediction ratio per kind and data set, and how many
    parameters are flagged."""
    parts = []
    for p in predictions:
        i = int((p.ratio / p.limit).argmax())  # the channel nearest its limit
        c = p.channels[i]
        scale = p.limit[i] / POOR_FIT  # what a correct model scores, at least 1
        correct = "" if scale <= 1.0 else f"; a correct model {scale:.2g} ×"
        parts.append(
            f"{p.kind} on {p.label} {p.rms[i]:.3g} {c.unit} RMS ({p.ratio[i]:.2g} × noise, "
            f"{c.name}{correct})"
        )
    text = word
    if parts:
        text += ": " + "; ".join(parts)
    if flagged:
        text += f"; {len(flagged)} parameter{'s' if len(flagged) > 1 else ''} not identified"
    return text

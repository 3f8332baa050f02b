"""bench/calibrate.py: the fit moves what a rule states, writes it back in place, and never unlists a rule."""

from __future__ import annotations

from bench.calibrate import CONFIDENCE_LINE, fitted


def test_the_fit_moves_towards_observed_precision():
    assert fitted(0.76, n=2, right=0, stated_sum=1.52) < 0.76
    assert fitted(0.45, n=2, right=2, stated_sum=0.90) > 0.45
    assert 0.05 <= fitted(0.5, n=100, right=0, stated_sum=50) <= 0.95


def test_a_rule_is_never_fitted_below_its_penalties():
    # two -0.1 boosts at once must leave the rule above zero: the engine drops a rule argued to 0%
    assert fitted(0.16, n=30, right=0, stated_sum=4.8, penalty=0.2) == 0.21


def test_the_confidence_line_is_rewritten_with_its_comment():
    text = "id: r\nconfidence: 0.76  # was 0.95; the dev fit\nboost:\n  - add: 0.1\n    confidence: 0.3\n"
    new, count = CONFIDENCE_LINE.subn(lambda m: f"confidence: 0.51{m['rest']}", text, count=1)
    assert count == 1
    assert "confidence: 0.51  # was 0.95; the dev fit\n" in new
    assert "    confidence: 0.3" in new  # only the top-level line

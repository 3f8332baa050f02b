"""bench/calibrate.py: the fit moves what a rule states, writes it back in place, and never unlists a rule."""

from __future__ import annotations

from bench.calibrate import fitted, listing_window, rewrite_confidence, worth_rewriting


def test_the_fit_moves_towards_observed_precision():
    assert fitted(0.76, n=2, right=0, stated_sum=1.52) < 0.76
    assert fitted(0.45, n=2, right=2, stated_sum=0.90) > 0.45
    assert 0.05 <= fitted(0.5, n=100, right=0, stated_sum=50) <= 0.95


def test_the_fit_never_changes_where_a_rule_is_listed():
    # boosts +0.2, -0.1, -0.1: listing flips at bases 0.0, 0.1, 0.2 (and -0.2 ...); at 0.16 the rule is listed where
    # one penalty applies and unlisted where both do, and a fit must keep both so, however far the data pull it
    assert listing_window(0.16, [0.2, -0.1, -0.1]) == (0.1, 0.2)
    assert fitted(0.16, n=45, right=0, stated_sum=5.0, adds=[0.2, -0.1, -0.1]) == 0.11
    assert fitted(0.16, n=45, right=40, stated_sum=5.0, adds=[0.2, -0.1, -0.1]) == 0.19
    assert fitted(0.5, n=10, right=10, stated_sum=5.0, adds=[-0.1]) == 0.86  # no threshold above 0.1: free to move


def test_the_confidence_line_is_rewritten_with_where_it_came_from():
    text = "id: r\nconfidence: 0.76  # was 0.95; a hand reason\nboost:\n  - add: 0.1\n    confidence: 0.3\n"
    new = rewrite_confidence(text, 0.51, right=5, n=9)
    assert new is not None
    assert "\nconfidence: 0.51  # dev fit (bench/calibrate.py): its cause was right in 5 of 9 established logs\n" in new
    assert "hand reason" not in new
    assert "    confidence: 0.3" in new  # only the top-level line
    assert rewrite_confidence("id: r\n", 0.5, 1, 1) is None


def test_apply_leaves_rules_seen_on_too_few_logs():
    assert worth_rewriting(13, 0.84, 0.70, min_logs=10)
    assert not worth_rewriting(1, 0.36, 0.70, min_logs=10)  # one log must not move a hand-set 0.70 to 0.36
    assert not worth_rewriting(0, 0.5, 0.5)
    assert not worth_rewriting(40, 0.5, 0.5, min_logs=10)  # nothing moved: nothing written
    assert worth_rewriting(1, 0.36, 0.70)  # the default keeps the old behaviour: any rule with a log


def test_the_fit_never_changes_whether_a_rule_is_hedged():
    # a rule stated at 0.26 + 0.05 sits below the 0.35 contributing line; a fit carrying it over would turn it
    # from a hypothesis into a contributing cause and silence the catch-all rules on the same logs
    assert listing_window(0.26, [0.05], hedge_line=0.35) == (0.0, 0.3)
    assert fitted(0.26, n=81, right=28, stated_sum=22.0, adds=[0.05], hedge_line=0.35) == 0.29
    assert fitted(0.26, n=81, right=28, stated_sum=22.0, adds=[0.05]) == 0.33  # without the line it would cross

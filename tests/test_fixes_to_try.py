"""The order fixes are offered in: the primary cause's own first; without one, one fix per candidate cause."""

from __future__ import annotations

from oomdoctor.diagnosis import Diagnosis, Fix, Report, fixes_to_try


def _d(category: str, confidence: float, role: str, *fix_ids: str, event: int = 0) -> Diagnosis:
    return Diagnosis(rule=f"r-{category}", category=category, confidence=confidence, title=category, role=role,
                     event_index=event, fixes=tuple(Fix(id=i, title=i) for i in fix_ids))


UNSETTLED = (
    _d("capacity", 0.37, "contributing", "halve-batch", "gradient-checkpointing", "bf16-autocast"),
    _d("batch_too_large", 0.22, "hypothesis", "halve-batch"),
    _d("eval_spike", 0.16, "hypothesis", "smaller-eval-batch", "eval-no-grad"),
    _d("seq_len_spike", 0.09, "hypothesis", "shorter-max-seq", "group-by-length"),
)


def test_without_a_primary_cause_each_candidate_gets_a_try_before_any_gets_a_second():
    assert fixes_to_try(UNSETTLED)[:4] == ("halve-batch", "smaller-eval-batch", "shorter-max-seq",
                                           "gradient-checkpointing")


def test_a_primary_cause_keeps_its_own_fixes_first():
    settled = (_d("fragmentation", 0.85, "primary", "expandable-segments", "max-split-size"),
               _d("capacity", 0.2, "hypothesis", "halve-batch"))
    assert fixes_to_try(settled) == ("expandable-segments", "max-split-size", "halve-batch")


def test_only_the_first_events_diagnoses_are_ordered():
    other = _d("host_oom", 0.9, "primary", "more-host-ram", event=1)
    assert "more-host-ram" not in fixes_to_try((*UNSETTLED, other))
    assert fixes_to_try(()) == ()


def test_the_report_carries_the_order_through_json():
    report = Report(diagnoses=UNSETTLED)
    assert report.fixes_to_try == fixes_to_try(UNSETTLED)
    assert Report.model_validate(report.model_dump()).fixes_to_try == report.fixes_to_try  # a JSON round trip

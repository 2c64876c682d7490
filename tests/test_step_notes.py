"""What the step tells the user when no plan fits its target (memopt.step_notes): a byte
budget the smallest step peak still fits, without the target's reserve, is not called
infeasible. Plain values; the numbers are Gemma 2's step at torch 0.3's peak on an H200
(forty-sixth session): predicted 11,491,743,218 bytes and measured 11,493,813,760, under
the 11,495,910,912-byte budget, over the blind reserve's target."""

from __future__ import annotations

from memopt import step_notes


def test_a_byte_budget_the_smallest_peak_fits_is_not_called_infeasible():
    said = step_notes.infeasible(11_495_910_912, 11_491_743_218, 11_208_513_140)
    assert said == (
        "budget 11495910912 leaves no room for its reserve in this step: the smallest "
        "predicted step peak is 11491743218 bytes, 4167694 under the budget but over its "
        "target 11208513140 (using that plan)"
    )
    assert step_notes.fit_word(11_495_910_912, 11_491_743_218, False) == (
        "over the target, under the budget: smallest found"
    )


def test_a_budget_under_the_smallest_peak_is_infeasible():
    over = step_notes.infeasible(11_495_910_912, 11_495_910_913, 11_438_431_357)
    assert over == (
        "budget 11495910912 is infeasible for this step; the smallest predicted step peak is "
        "11495910913 bytes (using that plan)"
    )
    assert step_notes.fit_word(11_495_910_912, 11_495_910_913, False) == (
        "INFEASIBLE, smallest found"
    )
    # a fraction of the saved bytes has no byte budget to compare with
    assert step_notes.infeasible(0.5, 10, 9).startswith("budget 0.5 is infeasible")
    assert step_notes.fit_word(0.5, 10, False) == "INFEASIBLE, smallest found"
    assert step_notes.fit_word(0.5, 10, True) == step_notes.fit_word(100, 10, True) == "fits"

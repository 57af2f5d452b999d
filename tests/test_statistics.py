"""Chapters 13 and 14's statistics: paired bootstrap of BLEU, Student's t, Holm; the
probes of chapter 13, Voita's argmax share, and the held warm-up of chapter 7."""
import math

import pytest
import torch

from annotated_transformer.lab.ablations import (fit_power_law, holm, paired_t, t_cdf,
                                                 t_quantile)
from annotated_transformer.lab.analysis import (argmax_share, bleu_of, bleu_stats,
                                                interval, linear_probe, mlp_probe,
                                                paired_bootstrap)
from annotated_transformer.training import lrate
from annotated_transformer.translator import corpus_bleu

HYPS = ["ein Hund läuft im Park .", "zwei Männer spielen Fußball", "eine Frau liest"]
REFS = ["ein Hund rennt im Park .", "zwei Männer spielen Fußball .", "eine Frau liest ."]


def test_summed_statistics_give_sacrebleus_corpus_score():
    stats = bleu_stats(HYPS, REFS)
    assert stats.shape == (3, 10)
    assert bleu_of(stats.sum(0)).item() == pytest.approx(corpus_bleu(HYPS, REFS)[0].score)


def test_the_bootstrap_is_paired_and_its_interval_holds_the_score():
    a, b = bleu_stats(HYPS, REFS), bleu_stats(REFS, REFS)
    boot = paired_bootstrap({"a": a, "same": a.clone(), "b": b}, n=300, seed=1)
    assert torch.equal(boot["a"], boot["same"])        # the same resamples for all
    assert (boot["b"] >= boot["a"]).all()              # the references score 100
    low, high = interval(boot["a"])
    assert low <= bleu_of(a.sum(0)).item() <= high
    with pytest.raises(ValueError, match="same sentences"):
        paired_bootstrap({"a": a, "short": a[:2]})


def test_student_t_and_holm():
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-3)
    assert t_cdf(0.0, 5) == pytest.approx(0.5)
    assert t_cdf(1.0, 1) == pytest.approx(0.5 + math.atan(1.0) / math.pi, abs=1e-9)
    for t in (1e4, 1e7):                                # huge t: still a probability
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert 0 <= paired_t([0.5, 0.5000001, 0.5])["p"] < 1e-6
    r = paired_t([0.1, 0.2, 0.3])
    assert r["low"] < 0.2 < r["high"] and 0 < r["p"] < 0.1
    assert paired_t([0.5, -0.5, 0.0])["p"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        paired_t([1.0])
    assert holm({"a": 0.01, "b": 0.5}) == {"a": 0.02, "b": 0.5}


def test_the_vectorised_power_law_fit_recovers_a_known_law():
    n = torch.tensor([1e4, 3e4, 1e5, 3e5, 1e6], dtype=torch.float64)
    fit = fit_power_law(n, 30 * n ** -0.25 + 1.5)
    assert fit["alpha"] == pytest.approx(0.25, abs=0.01)
    assert fit["l_inf"] == pytest.approx(1.5, abs=0.05) and fit["edge"] == ""
    assert fit_power_law(n, 5 * n ** -0.1)["edge"] == "low"            # no L∞ in the data


def test_probes_of_two_capacities_read_a_separable_property():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 8, generator=g)
    y = (x[:, 0] * x[:, 1] > 0).long()                 # not linear: an XOR
    assert mlp_probe(x[:400], y[:400], x[400:], y[400:], steps=400) > 0.85
    assert linear_probe(x[:400], y[:400], x[400:], y[400:]) < 0.7


def test_argmax_share_finds_a_previous_piece_head():
    n = 5
    w = torch.zeros(1, 1, n, n)
    w[0, 0, 0, 0] = 1
    for i in range(1, n):
        w[0, 0, i, i - 1] = 1                          # reads the previous piece
    real = torch.ones(1, n, dtype=torch.bool)
    # Voita et al.'s share counts only the queries that have a previous piece: 4 of 4
    assert argmax_share(w, real, -1).item() == pytest.approx(1.0)
    assert argmax_share(w, real, 0).item() == pytest.approx(1 / 5)
    real[0, 3:] = False                                # the last two pieces are padding
    assert argmax_share(w, real, -1).item() == pytest.approx(1.0)     # queries 1, 2
    assert argmax_share(w, real, 1).item() == pytest.approx(0.0)


def test_a_held_warm_up_has_the_peak_from_step_1_and_the_same_decay():
    assert lrate(1, 512, 4000, ramp=False) == lrate(4000, 512, 4000)
    assert lrate(2000, 512, 4000, ramp=False) == lrate(4000, 512, 4000)
    assert lrate(5000, 512, 4000, ramp=False) == lrate(5000, 512, 4000)

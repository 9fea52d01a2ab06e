"""The L-level comparison lines shared by bench_physics and bench_kinetix, on made-up records."""

from benchmarks.kinetix_l_levels import ratio_lines


def _peer(scene, n, rate, **labels):
    return {"what": "peer", "scene": scene, "n": n, "rate": rate, "compile_s": 3.0, **labels}


def test_each_level_is_paired_with_ours_and_each_group_summarised():
    ours = {
        ("l/a", "symbolic", 4): {"rate": 200.0, "compile_s": 1.5},
        ("random/random_0", "symbolic", 4): {"rate": 50.0, "compile_s": 2.0},
    }
    peer = [
        _peer("l/a", 4, 100.0, obs="symbolic"),
        _peer("random/random_0", 4, 100.0, obs="symbolic"),
        _peer("l/b", 4, 10.0, obs="symbolic"),  # a level jaxlab did not measure: no ratio
    ]
    lines = list(
        ratio_lines(
            ours,
            peer,
            what="kinetix_env_ratio",
            summary_what="kinetix_env_l_summary",
            peer="kinetix",
            by=("obs", "n"),
            unit="env_steps/s",
            action="multi_discrete",
        )
    )
    assert [line["what"] for line in lines] == [
        "peer", "kinetix_env_ratio", "peer", "kinetix_env_ratio", "peer", "kinetix_env_l_summary"
    ]  # fmt: skip
    assert lines[1] == {
        "what": "kinetix_env_ratio", "size": "L", "n": 4, "scene": "l/a", "obs": "symbolic",
        "action": "multi_discrete", "jaxlab_rate": 200.0, "kinetix_rate": 100.0, "ratio": 2.0,
        "jaxlab_compile_s": 1.5, "kinetix_compile_s": 3.0, "unit": "env_steps/s",
    }  # fmt: skip
    assert list(lines[1])[4:6] == ["obs", "action"] and lines[3]["ratio"] == 0.5
    assert lines[5] == {
        "what": "kinetix_env_l_summary", "n": 4, "levels": 2, "obs": "symbolic",
        "action": "multi_discrete", "all_median_ratio": 1.25, "all_worst_ratio": 0.5,
        "all_worst_level": "random/random_0", "official_median_ratio": 2.0,
        "official_worst_ratio": 2.0, "official_worst_level": "l/a", "random_median_ratio": 0.5,
        "random_worst_ratio": 0.5, "random_worst_level": "random/random_0",
    }  # fmt: skip


def test_one_summary_per_n_in_the_order_the_original_gave():
    ours = {(s, n): {"rate": 30.0, "compile_s": 1.0} for s in ("l/a", "l/b") for n in (16, 4)}
    peer = [_peer(s, n, 10.0 * (1 + (s == "l/b"))) for n in (16, 4) for s in ("l/a", "l/b")]
    lines = list(
        ratio_lines(
            ours,
            peer,
            what="physics_engine_ratio",
            summary_what="physics_engine_l_summary",
            peer="jax2d",
            by=("n",),
            unit="scene_steps/s",
            solver="pgs",
        )
    )
    ratio = lines[1]
    assert list(ratio)[:5] == ["what", "size", "n", "scene", "solver"]
    assert ratio["jax2d_rate"] == 10.0 and ratio["jax2d_compile_s"] == 3.0 and ratio["ratio"] == 3.0
    summaries = [line for line in lines if line["what"] == "physics_engine_l_summary"]
    assert [(s["n"], s["solver"], s["levels"], s["all_worst_level"]) for s in summaries] == [
        (16, "pgs", 2, "l/b"),
        (4, "pgs", 2, "l/b"),
    ]
    assert summaries[0]["all_median_ratio"] == 2.25 and "random_median_ratio" not in summaries[0]

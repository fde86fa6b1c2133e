"""Emotional bias drift (SPEC §14): polars over the Parquet tables of one or many run directories.

Every function takes `runs`: a run directory, a sweep directory (a folder whose sub-folders are run
directories) or a list of either, and returns a polars LazyFrame (call `.collect()`), so a notebook can
filter or join before anything is read. Every frame carries a `run` column (the run directory's
name), so the same code serves one run, an A/B pair or a whole sweep. Nothing loops over rows in
Python: the metrics are expressions over `pl.scan_parquet(run/"table"/"*.parquet")`.

The retrieval table already carries the eligible pool's size, mean emotional factor and mean valence
next to the served ones (SPEC §13), so no metric here re-scores memory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence, Union

import polars as pl

from sim.recorder import SCHEMAS
from sim.scenario import parse_duration

RunLike = Union[str, Path, Sequence[Union[str, Path]]]
KEY = ("run", "golem_id")
ACTIVITY_KINDS = ("curator", "contrarian", "dream", "reflex")

CONTAGION_PAYLOAD = pl.Struct({"alert_type": pl.String, "signal": pl.String, "latency_ms": pl.Int64,
                               "sender_entry": pl.Int64, "pad_before": pl.List(pl.Float64),
                               "pad_after": pl.List(pl.Float64), "tag": pl.List(pl.Float64)})
DEATH_PAYLOAD = pl.Struct({"cause": pl.String, "value": pl.Float64, "budget": pl.Float64})


# ---------------------------------------------------------------------------------- loading
def _is_run(p: Path) -> bool:
    return (p / "manifest.json").exists() or (p / "heartbeats").is_dir()


def _nested_runs(p: Path) -> list[Path]:
    """Run directories at any depth below `p`, sorted; a sweep nests them as
    runs/<scenario>/<combination>/seed=<n>/. Does not look inside a run directory."""
    out: list[Path] = []
    for q in sorted(q for q in p.iterdir() if q.is_dir()):
        out.extend([q] if _is_run(q) else _nested_runs(q))
    return out


def run_dirs(runs: RunLike) -> list[Path]:
    """Resolve `runs` to run directories: a run, a folder of runs (at any depth, e.g. a sweep
    directory), or a list of either. Each is checked as data first (`rundir.check_entries`): a link
    or FIFO planted under a name the run uses is refused, never followed or waited on. The parts'
    checksums are the commands' to check (`golem-sim report`, `diff`, `replay --verify`)."""
    from sim.rundir import check_entries
    items = [runs] if isinstance(runs, (str, Path)) else list(runs)
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if _is_run(p):
            out.append(p)
        elif p.is_dir():
            subs = _nested_runs(p)
            if not subs:
                raise FileNotFoundError(f"{p}: neither a run directory nor a folder of runs")
            out.extend(subs)
        else:
            raise FileNotFoundError(f"{p}: no such run directory")
    for d in out:
        check_entries(d)
    return out


def _names(dirs: list[Path]) -> list[str]:
    names = [d.name for d in dirs]
    return names if len(set(names)) == len(names) else [str(d) for d in dirs]


def run_names(runs: RunLike) -> list[str]:
    """The `run` column values, in the order `runs` lists them."""
    return _names(run_dirs(runs))


def scan_table(run: str | Path, table: str) -> pl.LazyFrame:
    """One table of one run, lazily; an absent or empty table is an empty frame of the right schema. The run
    is checked as data first (`rundir.check_entries`, as `run_dirs` does)."""
    from sim.rundir import check_entries
    check_entries(run)
    folder = Path(run) / table
    if not any(folder.glob("part-*.parquet")):
        return pl.from_arrow(SCHEMAS[table].empty_table()).lazy()
    return pl.scan_parquet(folder / "*.parquet")


def scan_runs(runs: RunLike, table: str) -> pl.LazyFrame:
    """The helper for several runs: `table` of every run stacked, with a leading `run` column."""
    dirs = run_dirs(runs)
    frames = [scan_table(d, table).select(pl.lit(n).alias("run"), pl.all()) for d, n in zip(dirs, _names(dirs))]
    return pl.concat(frames, how="vertical")


def manifest(run: str | Path) -> dict:
    """The run's manifest as recorded ({} when it has none yet), read as data (`rundir.read_bytes`: no link
    followed, no FIFO waited on)."""
    from sim.rundir import read_bytes
    p = Path(run) / "manifest.json"
    return json.loads(read_bytes(p, "the run's JSON manifest")) if p.exists() or p.is_symlink() else {}


def clade_names(run: str | Path) -> dict[int, str]:
    """Clade index -> name, in the order the world assigns them (declared clades, then first use)."""
    sc = manifest(run).get("scenario") or {}
    names = [c["name"] for c in sc.get("clades", [])]
    for g in sc.get("golems", []):
        if g.get("clade", "clade-0") not in names:
            names.append(g.get("clade", "clade-0"))
    return dict(enumerate(names))


def market(runs: RunLike) -> pl.LazyFrame:
    """The market table with `sim_ms`: the simulated time at which each bar is known.

    Generated markets are stamped in simulated time already. A real tape keeps its bars' epoch open
    times, while every other table counts simulated ms from the run's start; a bar is known at its
    close, so sim_ms = time_ms + bar_ms - t0_ms, with both from the manifest's `tape` facts.
    Join the market to heartbeats, retrievals or events on `sim_ms`, never on `time_ms`.
    """
    dirs = run_dirs(runs)
    frames = []
    for d, n in zip(dirs, _names(dirs)):
        tape = manifest(d).get("tape") or {}
        shift = int(tape.get("bar_ms", 0) or 0) - int(tape.get("t0_ms", 0) or 0)
        frames.append(scan_table(d, "market").select(pl.lit(n).alias("run"), pl.all(),
                                                     (pl.col("time_ms") + shift).alias("sim_ms")))
    return pl.concat(frames, how="vertical")


def _ms(every: str | int | float) -> int:
    """A bucket width as milliseconds: an int is ms already; a string is a duration ('6h', '30m')."""
    return int(every) if isinstance(every, (int, float)) else int(parse_duration(every) * 1000)


def _bucket(col: str, every_ms: int) -> pl.Expr:
    return (pl.col(col) // every_ms) * every_ms


def _nan_null(*cols: str) -> list[pl.Expr]:
    return [pl.col(c).fill_nan(None) for c in cols]


# ---------------------------------------------------------------------------------- retrieval bias
def chose(ids: str = "ids") -> pl.Expr:
    """True for a retrieval that chose: its eligible pool is larger than what it served. When the
    pool is no larger than top-k, the served entries are the whole pool, so served minus pool is 0
    by construction: such a retrieval says nothing about bias and no bias metric counts it."""
    return pl.col("pool_n") > pl.col(ids).list.len()


def retrieval_bias(runs: RunLike) -> pl.LazyFrame:
    """Both per-retrieval biases side by side, one row per retrieval tick that chose (`chose`: the
    pool is larger than the served top-k).

    mood_congruence = served_mean_emotional - pool_mean_emotional; valence_bias = served_mean_valence -
    pool_mean_valence. Ticks without a choice (no memories yet, or no more than top-k of them) are
    dropped rather than counted as 0: with nothing to choose from, recall cannot be biased, and
    counting those zeros would make a filling Grimoire look like a rising bias.
    """
    r = scan_runs(runs, "retrievals").with_columns(
        *_nan_null("served_mean_emotional", "pool_mean_emotional", "served_mean_valence", "pool_mean_valence"))
    return (r.filter(chose() & pl.col("served_mean_emotional").is_not_null()
                     & pl.col("pool_mean_emotional").is_not_null())
            .select("run", "golem_id", "clade_id", "tick", "time_ms", "query_p", "query_a", "query_d", "pool_n",
                    pl.col("ids").list.len().alias("k"),
                    (pl.col("served_mean_emotional") - pl.col("pool_mean_emotional")).alias("mood_congruence"),
                    (pl.col("served_mean_valence") - pl.col("pool_mean_valence")).alias("valence_bias"),
                    "anti_rumination",
                    pl.col("contrarian_ids").list.len().alias("n_contrarian"), "contrarian_changed")
            .sort("run", "golem_id", "tick"))


def choice_share(runs: RunLike) -> pl.LazyFrame:
    """Per run: retrievals recorded, how many chose (`chose`) and their share: the part of recall the
    bias metrics can see. A low share early in a run means the Grimoire is still smaller than top-k."""
    return (scan_runs(runs, "retrievals").group_by("run")
            .agg(pl.len().alias("retrievals_all"), chose().sum().alias("retrievals_chose"))
            .with_columns((pl.col("retrievals_chose") / pl.col("retrievals_all")).alias("chose_share")).sort("run"))


def mood_congruence(runs: RunLike) -> pl.LazyFrame:
    """Mood-congruence index per retrieval tick that chose (SPEC §14): mean emotional factor of the
    served top-k minus that of the whole eligible pool. 0 = mood does not bias recall; > 0 = recall
    favours memories whose tag resembles the current mood."""
    return retrieval_bias(runs).select("run", "golem_id", "clade_id", "tick", "time_ms", "mood_congruence")


def retrieval_valence_bias(runs: RunLike) -> pl.LazyFrame:
    """Retrieval valence bias per retrieval tick that chose: mean P of the served entries minus mean P
    of the pool (untagged count as 0 in both). < 0 = recall darker than the Grimoire it draws from."""
    return retrieval_bias(runs).select("run", "golem_id", "clade_id", "tick", "time_ms", "valence_bias")


def bias_over_time(runs: RunLike, every: str | int = "1h", by: Sequence[str] = ()) -> pl.LazyFrame:
    """Population distribution of both biases per time bucket (mean, median, quartiles), optionally per
    extra keys (e.g. by=["clade_id"]): the drift curve the notebooks and the report plot."""
    ms = _ms(every)
    keys = ["run", *by, "bucket_ms"]
    aggs = []
    for m in ("mood_congruence", "valence_bias"):
        c = pl.col(m)
        aggs += [c.mean().alias(f"{m}_mean"), c.median().alias(f"{m}_median"),
                 c.quantile(0.25).alias(f"{m}_q25"), c.quantile(0.75).alias(f"{m}_q75")]
    return (retrieval_bias(runs).with_columns(_bucket("time_ms", ms).alias("bucket_ms"))
            .group_by(keys).agg(pl.len().alias("n"), *aggs).sort(keys))


def lock_in_episodes(runs: RunLike, metric: str = "mood_congruence", threshold: float = 0.4,
                     min_ticks: int = 12, side: str = "above") -> pl.LazyFrame:
    """Runs of consecutive ticks of one Golem whose bias stays past a threshold: emotional lock-in.

    side 'above' flags metric > threshold, 'below' flags metric < -threshold, 'abs' flags |metric| >
    threshold. A run breaks at a tick without a retrieval (the tick sequence has a gap). One row per
    episode of at least `min_ticks` ticks: start/end tick and time, length, mean and peak bias.
    """
    m = pl.col(metric)
    flag = {"above": m > threshold, "below": m < -threshold, "abs": m.abs() > threshold}[side]
    g = list(KEY)
    b = retrieval_bias(runs).with_columns(flag.alias("_flag"))
    brk = ((pl.col("_flag") != pl.col("_flag").shift(1)) | (pl.col("tick") != pl.col("tick").shift(1) + 1)).over(g)
    peak = m.abs().arg_max()
    return (b.with_columns(brk.fill_null(True).cum_sum().over(g).alias("_seg"))
            .filter(pl.col("_flag"))
            .group_by("run", "golem_id", "_seg")
            .agg(pl.col("clade_id").first(), pl.col("tick").min().alias("start_tick"),
                 pl.col("tick").max().alias("end_tick"), pl.col("time_ms").min().alias("start_ms"),
                 pl.col("time_ms").max().alias("end_ms"), pl.len().alias("length"),
                 m.mean().alias("mean_bias"), m.get(peak).alias("peak_bias"))
            .filter(pl.col("length") >= min_ticks)
            .drop("_seg").sort("run", "golem_id", "start_tick"))


def bias_summary(runs: RunLike, threshold: float = 0.4, min_ticks: int = 12) -> pl.LazyFrame:
    """One row per run: mean biases over the retrievals that chose (`retrievals`), how much of the
    run Golems spent locked in, and `choice_share`'s columns (what share of recall the means see).
    A run in which no retrieval chose has null means and lock_in_share: no bias could be measured."""
    rb = retrieval_bias(runs).group_by("run").agg(
        pl.len().alias("retrievals"), pl.col("golem_id").n_unique().alias("golems"),
        pl.col("mood_congruence").mean().alias("mean_mood_congruence"),
        pl.col("valence_bias").mean().alias("mean_valence_bias"))
    ep = lock_in_episodes(runs, threshold=threshold, min_ticks=min_ticks).group_by("run").agg(
        pl.len().alias("lock_in_episodes"), pl.col("length").sum().alias("lock_in_ticks"),
        pl.col("length").max().alias("longest_lock_in"))
    return (pl.LazyFrame({"run": run_names(runs)}).join(rb, on="run", how="left").join(ep, on="run", how="left")
            .join(choice_share(runs), on="run", how="left")
            .with_columns(pl.col("retrievals", "golems", "lock_in_episodes", "lock_in_ticks", "longest_lock_in",
                                 "retrievals_all", "retrievals_chose").fill_null(0))
            .with_columns(pl.when(pl.col("retrievals") > 0).then(pl.col("lock_in_ticks") / pl.col("retrievals"))
                          .alias("lock_in_share")).sort("run"))


# ---------------------------------------------------------------------------------- Grimoire
def grimoire_valence_skew(runs: RunLike, every: str | int = "6h", own_only: bool = False) -> pl.LazyFrame:
    """Valence of what each Golem has written, over time.

    Per Golem and creation-time bucket: bucket_mean_p = sum(P of tagged entries) / entries in the
    bucket, and running_mean_p, the same ratio over everything written up to the bucket's end;
    untagged entries count in the denominator with P = 0 (SPEC §2.5), as in the curator's balance.
    running_neg_share is the share of entries with P < 0. Buckets without writes have no row.
    own_only drops inherited copies (provenance >= 0), to separate a Golem's own drift from contagion.
    """
    ms = _ms(every)
    e = scan_runs(runs, "entries")
    if own_only:
        e = e.filter(pl.col("provenance") < 0)
    tp = pl.when(pl.col("has_tag")).then(pl.col("p")).otherwise(0.0)
    g = list(KEY)
    return (e.with_columns(_bucket("created_ms", ms).alias("bucket_ms"))
            .group_by("run", "golem_id", "bucket_ms")
            .agg(pl.col("clade_id").first(), pl.len().alias("n"), pl.col("has_tag").sum().alias("n_tagged"),
                 tp.sum().alias("sum_p"), (tp < 0).sum().alias("n_neg"))
            .sort("run", "golem_id", "bucket_ms")
            .with_columns((pl.col("sum_p") / pl.col("n")).alias("bucket_mean_p"),
                          (pl.col("sum_p").cum_sum() / pl.col("n").cum_sum()).over(g).alias("running_mean_p"),
                          (pl.col("n_neg").cum_sum() / pl.col("n").cum_sum()).over(g).alias("running_neg_share"),
                          pl.col("n").cum_sum().over(g).alias("n_total"))
            .drop("sum_p", "n_neg"))


def access_counts(runs: RunLike) -> pl.LazyFrame:
    """Times each entry was served (= its access_count, which the entries table does not carry)."""
    return (scan_runs(runs, "retrievals").select("run", pl.col("ids").alias("id")).explode("id")
            .drop_nulls("id").filter(pl.col("id") >= 0).group_by("run", "id").agg(pl.len().alias("access_count")))


def grimoire_map(runs: RunLike, golems: Sequence[int] | None = None) -> pl.LazyFrame:
    """Entries placed on a 2-D map for the Grimoire plot (SPEC §14).

    The entries table has no embedding, so the map uses the emotional-tag plane: x = P, y = A of the
    tag (untagged entries at the origin), the coordinates along which mood biases recall. Entries
    sharing a tag are spread by a small deterministic jitter derived from the id. glow = salience;
    colour = the [S] label; core = heat: the log-scaled access count (log1p(n)/log1p(max n) per
    Golem, as the curator's heat is defined), or importance when no retrievals were recorded.
    """
    e = scan_runs(runs, "entries")
    if golems is not None:
        e = e.filter(pl.col("golem_id").is_in(list(golems)))
    ac = access_counts(runs)
    h = pl.col("id").hash(7)
    jx = ((h % 1000).cast(pl.Float64) / 1000 - 0.5) * 0.03
    jy = (((h // 1000) % 1000).cast(pl.Float64) / 1000 - 0.5) * 0.03
    tag = pl.col("has_tag")
    lg = pl.col("access_count").fill_null(0).log1p()
    return (e.join(ac, on=["run", "id"], how="left")
            .with_columns((pl.when(tag).then(pl.col("p")).otherwise(0.0) + jx).alias("x"),
                          (pl.when(tag).then(pl.col("a")).otherwise(0.0) + jy).alias("y"),
                          pl.col("access_count").fill_null(0))
            .with_columns(pl.when(pl.col("access_count").sum().over(KEY) > 0)
                          .then(lg / lg.max().over(KEY).clip(lower_bound=1e-12))
                          .otherwise(pl.col("importance")).alias("heat"))
            .select("run", "golem_id", "clade_id", "id", "created_ms", "x", "y", "salience", "label", "heat",
                    "access_count", "importance", "category", "flashbulb", "provenance")
            .sort("run", "golem_id", "id"))


# ---------------------------------------------------------------------------------- contrarian
def contrarian_effect(runs: RunLike, window: int = 12) -> pl.LazyFrame:
    """Every retrieval that carried a contrarian ("potentially overlooked") section (SPEC §4.4).

    Per pass: how many overlooked entries were shown, whether the decision changed
    (contrarian_changed), and the mean biases over the `window` retrievals before it and the
    `window` after it, so the effect of the pass on lock-in can be read per pass or averaged.
    Empty while the engine records no contrarian section.
    """
    g = list(KEY)
    cols = []
    for m in ("mood_congruence", "valence_bias"):
        c = pl.col(m)
        cols += [c.shift(1).rolling_mean(window, min_samples=1).over(g).alias(f"{m}_before"),
                 # reversed trailing mean = leading mean over ticks i+1 .. i+window (shorter near the end)
                 c.reverse().shift(1).rolling_mean(window, min_samples=1).reverse().over(g).alias(f"{m}_after")]
    return (retrieval_bias(runs).with_columns(*cols)
            .filter(pl.col("n_contrarian") > 0)
            .select("run", "golem_id", "clade_id", "tick", "time_ms", "n_contrarian",
                    pl.col("contrarian_changed").alias("changed"), "mood_congruence",
                    "mood_congruence_before", "mood_congruence_after", "valence_bias_before", "valence_bias_after"))


def contrarian_summary(runs: RunLike, window: int = 12) -> pl.LazyFrame:
    """Per run: contrarian passes, the share that changed a decision, and bias before vs after."""
    c = contrarian_effect(runs, window)
    dirs = run_dirs(runs)
    return (pl.LazyFrame({"run": _names(dirs)})
            .join(c.group_by("run").agg(
                pl.len().alias("passes"), pl.col("changed").sum().alias("changed"),
                pl.col("mood_congruence_before").mean().alias("mc_before"),
                pl.col("mood_congruence_after").mean().alias("mc_after"),
                pl.col("valence_bias_before").mean().alias("vb_before"),
                pl.col("valence_bias_after").mean().alias("vb_after")), on="run", how="left")
            .with_columns(pl.col("passes", "changed").fill_null(0))
            .with_columns(pl.when(pl.col("passes") > 0).then(pl.col("changed") / pl.col("passes")).alias("changed_share"),
                          (pl.col("mc_after") - pl.col("mc_before")).alias("mc_delta"))
            .sort("run"))


# ---------------------------------------------------------------------------------- contagion
def golem_clades(runs: RunLike) -> pl.LazyFrame:
    """(run, golem_id) -> clade_id, from the heartbeats (a Golem never changes Clade)."""
    return scan_runs(runs, "heartbeats").group_by(*KEY).agg(pl.col("clade_id").first())


def golem_assets(runs: RunLike) -> pl.LazyFrame:
    """(run, golem_id) -> asset: the asset whose latest close at the Golem's first heartbeat equals
    the price it saw (read from the data, so it holds for generated and real tapes alike)."""
    hb = (scan_runs(runs, "heartbeats").group_by(*KEY)
          .agg(pl.col("time_ms").min().alias("t0"), pl.col("price").sort_by("time_ms").first().alias("price")))
    m = market(runs).select("run", "asset", pl.col("sim_ms").alias("mt"), "close")
    return (hb.join(m, on="run", how="inner").filter(pl.col("mt") <= pl.col("t0"))
            .group_by(*KEY, "asset").agg(pl.col("close").sort_by("mt").last(), pl.col("price").first())
            .with_columns((pl.col("close") - pl.col("price")).abs().alias("_err"))
            .sort(*KEY, "_err", "asset").group_by(*KEY, maintain_order=True).first()
            .select(*KEY, "asset"))


def contagion_waves(runs: RunLike) -> pl.LazyFrame:
    """One row per contagion delivery (events kind 'contagion', SPEC §2.7 and §9).

    sender = other_golem; sent_ms = delivery time - latency; da/dp = the receiver's arousal/pleasure
    shift at delivery (pad_after - pad_before). clade_distance is 0 within the sender's Clade and 1
    across Clades. A push is identified by (run, sender, sender_entry).
    """
    ev = scan_runs(runs, "events").filter(pl.col("kind") == "contagion")
    pl_ = pl.col("payload").str.json_decode(CONTAGION_PAYLOAD)
    gc = golem_clades(runs).rename({"golem_id": "sender", "clade_id": "sender_clade"})
    return (ev.select("run", "time_ms", pl.col("golem_id").alias("receiver"), pl.col("clade_id").alias("receiver_clade"),
                      pl.col("other_golem").alias("sender"), "entry_id", pl_.alias("pl"))
            .unnest("pl")
            .join(gc, on=["run", "sender"], how="left")
            .with_columns(pl.col("latency_ms").fill_null(0))
            .select("run", (pl.col("time_ms") - pl.col("latency_ms")).alias("sent_ms"), "time_ms", "sender",
                    "sender_clade", "sender_entry", "receiver", "receiver_clade",
                    (pl.col("receiver_clade") != pl.col("sender_clade")).cast(pl.Int8).alias("clade_distance"),
                    "alert_type", "signal", "latency_ms",
                    pl.col("tag").list.get(0, null_on_oob=True).alias("tag_p"),
                    pl.col("tag").list.get(1, null_on_oob=True).alias("tag_a"),
                    pl.col("pad_before").list.get(0, null_on_oob=True).alias("p_before"),
                    pl.col("pad_before").list.get(1, null_on_oob=True).alias("a_before"),
                    pl.col("pad_after").list.get(0, null_on_oob=True).alias("p_after"),
                    pl.col("pad_after").list.get(1, null_on_oob=True).alias("a_after"))
            .with_columns((pl.col("a_after") - pl.col("a_before")).alias("da"),
                          (pl.col("p_after") - pl.col("p_before")).alias("dp"))
            .sort("run", "time_ms", "receiver"))


def contagion_pushes(runs: RunLike) -> pl.LazyFrame:
    """Per push: receivers reached, their mean/max arousal shift, latency range and Clades touched."""
    return (contagion_waves(runs)
            .group_by("run", "sender", "sender_entry", "sent_ms", "alert_type", "signal")
            .agg(pl.len().alias("receivers"), pl.col("da").mean().alias("mean_da"), pl.col("da").max().alias("max_da"),
                 pl.col("dp").mean().alias("mean_dp"), pl.col("latency_ms").min().alias("min_latency_ms"),
                 pl.col("latency_ms").max().alias("max_latency_ms"),
                 pl.col("receiver_clade").n_unique().alias("clades"))
            .sort("run", "sent_ms", "sender"))


def contagion_response(runs: RunLike, before: str | int = "1h", after: str | int = "6h",
                       alert_type: str | None = "flashbulb") -> pl.LazyFrame:
    """The wave: each receiver's heartbeat PAD around every delivery, on a time axis relative to the
    delivery (rel_ms), so arousal shift can be averaged by latency and clade distance."""
    b, a = _ms(before), _ms(after)
    w = contagion_waves(runs)
    if alert_type is not None:
        w = w.filter(pl.col("alert_type") == alert_type)
    hb = scan_runs(runs, "heartbeats").select("run", pl.col("golem_id").alias("receiver"),
                                               pl.col("time_ms").alias("hb_ms"), "p", "a", "d")
    return (w.select("run", "sender", "sender_entry", "sent_ms", "time_ms", "receiver", "clade_distance", "latency_ms",
                     "da")
            .join(hb, on=["run", "receiver"], how="inner")
            .with_columns((pl.col("hb_ms") - pl.col("time_ms")).alias("rel_ms"))
            .filter(pl.col("rel_ms").is_between(-b, a))
            .sort("run", "sent_ms", "receiver", "rel_ms"))


# ---------------------------------------------------------------------------------- salience rank
def salience_rank_lift(runs: RunLike) -> pl.LazyFrame:
    """Served (plain) vs salience-shadow top-k, per retrieval (SPEC §4.2, §14).

    For each list: mean salience, how many of its entries carry an outcome (those are the entries a
    decision acts on: DECIDING weighs served entries with outcomes, acted_on_count += 1), and the
    mean outcome of those, i.e. the unweighted memory signal that list would give. next_return is
    the Golem's realised P&L over its next tick as a fraction of value: the result of the decision.
    A hit is a memory signal whose sign matches next_return. In shadow mode nothing differs when
    the lists coincide (overlap == k), so `reordered` marks the retrievals the multiplier changed.
    """
    r = scan_runs(runs, "retrievals").filter(pl.col("ids").list.len() > 0).select(
        "run", "golem_id", "clade_id", "tick", "time_ms", "ids", "salience_shadow")
    ent = scan_runs(runs, "entries").select("run", "id", "salience", "has_outcome", "outcome")
    out = r.select("run", "golem_id", "clade_id", "tick", "time_ms", pl.col("ids").list.len().alias("k"),
                   pl.col("ids").list.set_intersection("salience_shadow").list.len().alias("overlap"),
                   (pl.col("ids") != pl.col("salience_shadow")).alias("reordered"))
    for name, col in (("served", "ids"), ("shadow", "salience_shadow")):
        side = (r.select("run", "golem_id", "tick", pl.col(col).alias("id")).explode("id")
                .filter(pl.col("id") >= 0).join(ent, on=["run", "id"], how="left")
                .group_by("run", "golem_id", "tick")
                .agg(pl.col("salience").mean().alias(f"{name}_salience"),
                     pl.col("has_outcome").sum().alias(f"{name}_acted"),
                     pl.col("outcome").filter(pl.col("has_outcome")).mean().alias(f"{name}_outcome")))
        out = out.join(side, on=["run", "golem_id", "tick"], how="left")
    nxt = scan_runs(runs, "heartbeats").select(
        "run", "golem_id", (pl.col("tick") - 1).alias("tick"),
        (pl.col("pnl") / pl.col("value").abs().clip(lower_bound=1e-12)).alias("next_return"))
    sgn = pl.col("next_return").sign()
    return (out.join(nxt, on=["run", "golem_id", "tick"], how="left")
            .with_columns((pl.col("served_outcome").sign() == sgn).alias("served_hit"),
                          (pl.col("shadow_outcome").sign() == sgn).alias("shadow_hit"))
            .sort("run", "golem_id", "tick"))


def salience_lift_summary(runs: RunLike) -> pl.LazyFrame:
    """Per run: how often the shadow ranking differs, and served vs shadow salience, acted-on share,
    mean outcome and hit rate; lift = shadow - served (positive = the salience rank would help)."""
    s = salience_rank_lift(runs)
    return (s.group_by("run").agg(
        pl.len().alias("retrievals"), pl.col("reordered").mean().alias("reordered_share"),
        (pl.col("overlap") / pl.col("k")).mean().alias("mean_overlap"),
        pl.col("served_salience").mean(), pl.col("shadow_salience").mean(),
        (pl.col("served_acted") / pl.col("k")).mean().alias("served_acted_share"),
        (pl.col("shadow_acted") / pl.col("k")).mean().alias("shadow_acted_share"),
        pl.col("served_outcome").mean(), pl.col("shadow_outcome").mean(),
        pl.col("served_hit").mean().alias("served_hit_rate"), pl.col("shadow_hit").mean().alias("shadow_hit_rate"))
        .with_columns((pl.col("shadow_salience") - pl.col("served_salience")).alias("salience_lift"),
                      (pl.col("shadow_hit_rate") - pl.col("served_hit_rate")).alias("hit_rate_lift"))
        .sort("run"))


# ---------------------------------------------------------------------------------- lives
def golem_pnl(runs: RunLike) -> pl.LazyFrame:
    """P&L, the one definition every command uses (run summary, diff, report, sweep): per Golem, its
    value at its last heartbeat (after that tick's fees) against its initial book, the `capital` the
    scenario gave it; a Golem that never ticked keeps its capital. Golem ids follow the scenario's
    groups in order, as the world numbers them. Columns: run, golem_id, clade_id, capital,
    final_value, pnl = final_value - capital, pnl_pct = final_value / capital - 1."""
    dirs = run_dirs(runs)
    frames = []
    for d, name in zip(dirs, _names(dirs)):
        sc = manifest(d).get("scenario") or {}
        clades = {v: k for k, v in clade_names(d).items()}
        caps = [(g.get("capital", 10_000.0), clades.get(g.get("clade", "clade-0"), 0))
                for g in sc.get("golems", []) for _ in range(int(g.get("count", 1)))]
        golems = pl.LazyFrame({"golem_id": list(range(len(caps))), "clade_id": [c for _, c in caps],
                               "capital": [float(v) for v, _ in caps]},
                              schema={"golem_id": pl.Int64, "clade_id": pl.Int64, "capital": pl.Float64})
        last = (scan_table(d, "heartbeats").group_by("golem_id")
                .agg(pl.col("value").sort_by("time_ms").last().alias("final_value"))
                .with_columns(pl.col("golem_id").cast(pl.Int64)))
        frames.append(golems.join(last, on="golem_id", how="left")
                      .with_columns(pl.col("final_value").fill_null(pl.col("capital")))
                      .select(pl.lit(name).alias("run"), pl.all()))
    return (pl.concat(frames, how="vertical")
            .with_columns((pl.col("final_value") - pl.col("capital")).alias("pnl"),
                          (pl.col("final_value") / pl.col("capital") - 1).alias("pnl_pct")))


def run_pnl(runs: RunLike, by: Sequence[str] = ()) -> pl.LazyFrame:
    """`golem_pnl` summed per run (and per `by`, e.g. ["clade_id"]): capital, final_value, pnl and
    pnl_pct = Σ final_value / Σ capital - 1."""
    return (golem_pnl(runs).group_by("run", *by)
            .agg(pl.len().alias("golems"), pl.col("capital").sum(), pl.col("final_value").sum())
            .with_columns((pl.col("final_value") - pl.col("capital")).alias("pnl"),
                          (pl.col("final_value") / pl.col("capital") - 1).alias("pnl_pct"))
            .sort("run", *by))


def life_summaries(runs: RunLike) -> pl.LazyFrame:
    """One row per Golem: lifetime, how it ended, what it earned and felt.

    ticks = heartbeats recorded; value0 = value at its first heartbeat; capital = its initial book;
    pnl = final value - capital (`golem_pnl`, the one P&L definition);
    cause = payload.cause of its 'death' event (null while alive); flashbulbs = 'flashbulb' events;
    emotions = the distinct Plutchik emotions it visited (sorted), dominant_emotion the most frequent.
    """
    hb = scan_runs(runs, "heartbeats")
    t = "time_ms"
    life = hb.group_by(*KEY).agg(
        pl.col("clade_id").first(), pl.len().alias("ticks"), pl.col(t).min().alias("first_ms"),
        pl.col(t).max().alias("last_ms"), pl.col("value").sort_by(t).first().alias("value0"),
        pl.col("value").sort_by(t).last().alias("final_value"), pl.col("vitality").sort_by(t).last().alias("final_vitality"),
        pl.col("phase").sort_by(t).last().alias("final_phase"), pl.col("a").max().alias("max_arousal"),
        pl.col("p").mean().alias("mean_p"), pl.col("a").mean().alias("mean_a"), pl.col("d").mean().alias("mean_d"),
        pl.col("emotion").unique().sort().alias("emotions"),
        pl.col("emotion").mode().sort().first().alias("dominant_emotion"))
    ev = scan_runs(runs, "events")
    death = (ev.filter(pl.col("kind") == "death")
             .select(*KEY, pl.col("time_ms").alias("died_ms"),
                     pl.col("payload").str.json_decode(DEATH_PAYLOAD).struct.field("cause").alias("cause"))
             .unique(subset=list(KEY), keep="first"))
    fb = ev.filter(pl.col("kind") == "flashbulb").group_by(*KEY).agg(pl.len().alias("flashbulbs"))
    cap = golem_pnl(runs).select("run", pl.col("golem_id").cast(pl.Int32), "capital")
    return (life.with_columns(pl.col("golem_id").cast(pl.Int32))
            .join(death.with_columns(pl.col("golem_id").cast(pl.Int32)), on=list(KEY), how="left")
            .join(fb.with_columns(pl.col("golem_id").cast(pl.Int32)), on=list(KEY), how="left")
            .join(cap, on=list(KEY), how="left")
            .with_columns(pl.col("flashbulbs").fill_null(0).cast(pl.UInt32),
                          (pl.col("final_value") - pl.col("capital")).alias("pnl"),
                          (pl.col("final_value") / pl.col("capital") - 1).alias("pnl_pct"),
                          pl.col("died_ms").is_null().alias("alive"),
                          pl.col("emotions").list.len().alias("n_emotions"))
            .sort(*KEY))


# ---------------------------------------------------------------------------------- series for plots
def pad_bands(runs: RunLike, every: str | int = "1h") -> pl.LazyFrame:
    """Median and inter-quartile range of the emotion's P, A, D per Clade per time bucket, and the
    median of the mood's (`mood_p_median`, ...)."""
    ms = _ms(every)
    aggs = []
    for c in ("p", "a", "d"):
        aggs += [pl.col(c).median().alias(f"{c}_median"), pl.col(c).quantile(0.25).alias(f"{c}_q25"),
                 pl.col(c).quantile(0.75).alias(f"{c}_q75"), pl.col(f"mood_{c}").median().alias(f"mood_{c}_median")]
    return (scan_runs(runs, "heartbeats").with_columns(_bucket("time_ms", ms).alias("bucket_ms"))
            .group_by("run", "clade_id", "bucket_ms").agg(pl.len().alias("n"), *aggs)
            .sort("run", "clade_id", "bucket_ms"))


def emotion_shares(runs: RunLike, every: str | int = "1h") -> pl.LazyFrame:
    """Share of heartbeats in each Plutchik emotion per time bucket (rows: run, bucket, emotion)."""
    ms = _ms(every)
    return (scan_runs(runs, "heartbeats").with_columns(_bucket("time_ms", ms).alias("bucket_ms"))
            .group_by("run", "bucket_ms", "emotion").agg(pl.len().alias("n"))
            .with_columns((pl.col("n") / pl.col("n").sum().over("run", "bucket_ms")).alias("share"))
            .sort("run", "bucket_ms", "emotion"))


def holders(runs: RunLike, at: str | int | float, asset: str | None = None, min_exposure: float = 0.1) -> pl.LazyFrame:
    """(run, golem_id) of the Golems holding more than `min_exposure` of their value in their asset
    (only those trading `asset`, when given) at their last awake heartbeat before `at` (a
    duration from the start, or simulated ms): who a situation concerns (SPEC §2.8)."""
    at_ms = _ms(at)
    hb = (scan_runs(runs, "heartbeats").filter((pl.col("time_ms") < at_ms) & (pl.col("state_path") != "DREAMING"))
          .group_by(*KEY).agg(pl.col("exposure").sort_by("time_ms").last()))
    if asset is not None:
        hb = hb.join(golem_assets(runs).filter(pl.col("asset") == asset), on=list(KEY), how="inner")
    return hb.filter(pl.col("exposure") > min_exposure).select(*KEY)


def situation_emotions(runs: RunLike, start: str | int | float, end: str | int | float, *, asset: str | None = None,
                       who: str = "holders", min_exposure: float = 0.1,
                       situation_start: str | int | float | None = None) -> pl.LazyFrame:
    """The emotions of the Golems a situation concerns over its awake heartbeats in [start, end)
    (SPEC §2.8): one row per (run, emotion) with `n`, `share` of those heartbeats and `rank` (1 =
    the modal emotion; ties broken by name). `who`: "holders" (more than `min_exposure` of value in
    `asset` when the situation starts: at `situation_start`, default `start`) or "all"."""
    lo, hi = _ms(start), _ms(end)
    hb = scan_runs(runs, "heartbeats").filter((pl.col("time_ms") >= lo) & (pl.col("time_ms") < hi)
                                              & (pl.col("state_path") != "DREAMING"))
    if who == "holders":
        at = lo if situation_start is None else _ms(situation_start)
        hb = hb.join(holders(runs, at, asset, min_exposure), on=list(KEY), how="semi")
    elif who != "all":
        raise ValueError(f"who: expected 'holders' or 'all', got {who!r}")
    return (hb.group_by("run", "emotion").agg(pl.len().alias("n"))
            .with_columns((pl.col("n") / pl.col("n").sum().over("run")).alias("share"))
            .sort("run", pl.col("n"), "emotion", descending=[False, True, False])
            .with_columns(pl.int_range(1, pl.len() + 1).over("run").alias("rank")))


def pinned_share(runs: RunLike, threshold: float = 0.99) -> pl.LazyFrame:
    """Per run: the share of awake heartbeats with some PAD component at |x| >= threshold, for the
    emotion (`emotion_pinned`) and the mood (`mood_pinned`) (SPEC §2.8: at most 5 %)."""
    def pinned(cols):
        return pl.any_horizontal([pl.col(c).abs() >= threshold for c in cols]).mean()
    return (scan_runs(runs, "heartbeats").filter(pl.col("state_path") != "DREAMING").group_by("run")
            .agg(pinned(("p", "a", "d")).alias("emotion_pinned"),
                 pinned(("mood_p", "mood_a", "mood_d")).alias("mood_pinned"), pl.len().alias("n"))
            .sort("run"))


def regime_spans(runs: RunLike) -> pl.LazyFrame:
    """Consecutive stretches of one market regime per asset, on the simulated clock (`sim_ms` of
    `market`): start_ms, end_ms (the next bar's time), regime."""
    m = market(runs).sort("run", "asset", "sim_ms")
    seg = pl.col("regime").rle_id().over("run", "asset")
    return (m.with_columns(seg.alias("_seg"), pl.col("sim_ms").shift(-1).over("run", "asset").alias("_next"))
            .group_by("run", "asset", "_seg")
            .agg(pl.col("regime").first(), pl.col("sim_ms").min().alias("start_ms"),
                 pl.coalesce(pl.col("_next").max(), pl.col("sim_ms").max()).alias("end_ms"))
            .drop("_seg").sort("run", "asset", "start_ms"))


def event_counts(runs: RunLike, kinds: Iterable[str] = ACTIVITY_KINDS, every: str | int = "6h") -> pl.LazyFrame:
    """Events of the given kinds per time bucket (rows only where some occurred)."""
    ms = _ms(every)
    return (scan_runs(runs, "events").filter(pl.col("kind").is_in(list(kinds)))
            .with_columns(_bucket("time_ms", ms).alias("bucket_ms"))
            .group_by("run", "kind", "bucket_ms").agg(pl.len().alias("n")).sort("run", "kind", "bucket_ms"))


# ---------------------------------------------------------------------------------- lock-in (SPEC §2.9)
def crash_episode(runs: RunLike, *, asset: str | None = None, start: str | int | float | None = None,
                  window: str | int = "3h") -> pl.LazyFrame:
    """Per run: the crash and the price's recovery, from the market table (SPEC §2.9).

    Without `start`, the crash is the deepest fall within `window`: the bar where close / (the highest
    close of the `window` before it) is lowest, and the crash starts at that highest close. With
    `start` (a duration or simulated ms) it starts at the last bar before it. Either way the
    pre-crash level is the close where it starts, the trough the lowest close in [start, start +
    window], and the price's full recovery the first bar after the trough closing at or above the
    pre-crash level (null when the price never gets back). Without `asset`, the asset that fell
    deepest. Columns: run, asset, crash_ms, pre_price, trough_ms, trough_price, depth (trough /
    pre - 1), price_recovered_ms, price_recovery_s (from the crash's start), end_ms (the last bar).
    """
    w = _ms(window)
    rows = []
    dirs = run_dirs(runs)
    for d, name in zip(dirs, _names(dirs)):
        m = market(d).select("asset", "sim_ms", "close").collect()
        assets = [asset] if asset is not None else sorted(m["asset"].unique().to_list())
        best = None
        for a in assets:
            s = m.filter(pl.col("asset") == a).sort("sim_ms")
            if s.height == 0:
                raise ValueError(f"{d}: asset {a!r} is not in the market table")
            if start is None:
                dd = s.with_columns((pl.col("close") / pl.col("close").rolling_max_by("sim_ms", window_size=f"{w}i"))
                                    .alias("_dd"))
                t_low = dd["sim_ms"][int(dd["_dd"].arg_min())]
                before = s.filter(pl.col("sim_ms").is_between(t_low - w, t_low, closed="right"))
                t0 = before["sim_ms"][int(before["close"].arg_max())]
            else:
                at = s.filter(pl.col("sim_ms") < _ms(start))
                t0 = at["sim_ms"][-1] if at.height else s["sim_ms"][0]
            pre = s.filter(pl.col("sim_ms") == t0)["close"][0]
            fall = s.filter(pl.col("sim_ms").is_between(t0, t0 + w))
            i = int(fall["close"].arg_min())
            trough_ms, trough = fall["sim_ms"][i], fall["close"][i]
            back = s.filter((pl.col("sim_ms") > trough_ms) & (pl.col("close") >= pre))
            rec = back["sim_ms"][0] if back.height else None
            row = dict(run=name, asset=a, crash_ms=t0, pre_price=pre, trough_ms=trough_ms, trough_price=trough,
                       depth=trough / pre - 1, price_recovered_ms=rec,
                       price_recovery_s=None if rec is None else (rec - t0) / 1000, end_ms=s["sim_ms"][-1])
            if best is None or row["depth"] < best["depth"]:
                best = row
        rows.append(best)
    return pl.LazyFrame(rows, schema={"run": pl.String, "asset": pl.String, "crash_ms": pl.Int64,
                                      "pre_price": pl.Float64, "trough_ms": pl.Int64, "trough_price": pl.Float64,
                                      "depth": pl.Float64, "price_recovered_ms": pl.Int64,
                                      "price_recovery_s": pl.Float64, "end_ms": pl.Int64})


def _situation_holders(run: Path, at_ms: int, asset: str, min_exposure: float) -> pl.DataFrame:
    """The holders of `asset` when the situation starts (`holders`), with the value, exposure and
    price of that last awake heartbeat before it."""
    who = holders(run, at_ms, asset, min_exposure).collect()
    snap = (scan_table(run, "heartbeats").filter((pl.col("time_ms") < at_ms) & (pl.col("state_path") != "DREAMING"))
            .group_by("golem_id").agg(pl.col("value", "exposure", "price").sort_by("time_ms").last()).collect())
    return who.select("golem_id").join(snap, on="golem_id", how="inner")


def holder_mood(runs: RunLike, episodes: pl.LazyFrame | pl.DataFrame | None = None, *, every: str | int = "30m",
                min_exposure: float = 0.1, **crash) -> pl.LazyFrame:
    """The holders' mood through a crash and its recovery, per run and time bucket (SPEC §2.9): the
    mean mood P and emotion P over the awake heartbeats of the Golems holding more than
    `min_exposure` of their value in the crashed asset when the crash starts, their count, and the
    asset's last close in the bucket. `episodes` = `crash_episode(runs, **crash)` by default. The
    lock-in panel plots mood_p against close."""
    ep = (crash_episode(runs, **crash) if episodes is None else episodes.lazy()).collect()
    ms = _ms(every)
    frames = []
    dirs = run_dirs(runs)
    for d, name in zip(dirs, _names(dirs)):
        e = ep.filter(pl.col("run") == name)
        if e.height == 0:
            continue
        e = e.row(0, named=True)
        who = _situation_holders(d, e["crash_ms"], e["asset"], min_exposure).select("golem_id")
        hb = (scan_table(d, "heartbeats").filter(pl.col("state_path") != "DREAMING")
              .join(who.lazy(), on="golem_id", how="semi")
              .group_by(_bucket("time_ms", ms).alias("bucket_ms"))
              .agg(pl.col("mood_p").mean(), pl.col("p").mean(), pl.col("golem_id").n_unique().alias("holders")))
        px = (market(d).filter(pl.col("asset") == e["asset"])
              .group_by(_bucket("sim_ms", ms).alias("bucket_ms")).agg(pl.col("close").sort_by("sim_ms").last()))
        frames.append(hb.join(px, on="bucket_ms", how="left").select(pl.lit(name).alias("run"), pl.all()))
    empty = pl.LazyFrame(schema={"run": pl.String, "bucket_ms": pl.Int64, "mood_p": pl.Float64, "p": pl.Float64,
                                 "holders": pl.UInt32, "close": pl.Float64})
    return pl.concat([empty, *frames], how="vertical_relaxed").sort("run", "bucket_ms")


def mood_recovery(runs: RunLike, *, asset: str | None = None, start: str | int | float | None = None,
                  window: str | int = "3h", pre: str | int = "6h", tolerance: float = 0.1, every: str | int = "30m",
                  min_exposure: float = 0.1) -> pl.LazyFrame:
    """Lock-in after a crash (SPEC §2.9), one row per run: how long the holders' mood stays down once
    the price is back, and what that costs them.

    The crash and the price's recovery are `crash_episode`'s (asset, start, window). Holders: more
    than `min_exposure` of their value in the asset at their last awake heartbeat before the crash
    (SPEC §2.8). pre_mood_p: the mean mood P of their awake heartbeats in the `pre` before the crash.
    The mood has recovered in the first `every` bucket of `holder_mood` at or after the price's
    full recovery whose mean mood P is no more than `tolerance` below pre_mood_p (a mood above its
    pre-crash level is not lock-in); mood_recovery_s runs from the price's recovery to that bucket's
    start (0 when the mood is back first), or to the last heartbeat when it never gets back
    (capped = true). Null when the price never recovers.

    The consequence: captured_share = the holders' value gained from the trough to the price's
    recovery / what the units they held before the crash (exposure x value / price) would have
    gained over it (1 = rode the whole recovery, 0 = missed it); final_value: their mean value at
    their last heartbeat; final_value_ratio: their summed final value / their summed pre-crash value.
    """
    ep = crash_episode(runs, asset=asset, start=start, window=window).collect()
    series = holder_mood(runs, ep, every=every, min_exposure=min_exposure).collect()
    ms, pre_ms = _ms(every), _ms(pre)
    rows = []
    dirs = run_dirs(runs)
    for d, name in zip(dirs, _names(dirs)):
        e = ep.filter(pl.col("run") == name).row(0, named=True)
        t0, t_rec = e["crash_ms"], e["price_recovered_ms"]
        who = _situation_holders(d, t0, e["asset"], min_exposure)
        hb = scan_table(d, "heartbeats").join(who.select("golem_id").lazy(), on="golem_id", how="semi")
        pre_p = hb.filter((pl.col("time_ms") >= t0 - pre_ms) & (pl.col("time_ms") < t0)
                          & (pl.col("state_path") != "DREAMING")).select(pl.col("mood_p").mean()).collect().item()
        last = hb.group_by("golem_id").agg(pl.col("value").sort_by("time_ms").last()).collect()
        end_ms = scan_table(d, "heartbeats").select(pl.col("time_ms").max()).collect().item()
        row = dict(e, holders=who.height, pre_mood_p=pre_p, mood_recovered_ms=None, mood_recovery_s=None, capped=None,
                   captured_share=None,
                   final_value=last["value"].mean() if last.height else None,
                   final_value_ratio=(last["value"].sum() / who["value"].sum()) if who.height else None)
        if t_rec is not None and who.height and pre_p is not None:
            s = series.filter((pl.col("run") == name) & (pl.col("bucket_ms") + ms > t_rec)
                              & (pl.col("mood_p") >= pre_p - tolerance))
            capped = s.height == 0
            back = end_ms if capped else max(s["bucket_ms"][0], t_rec)
            row.update(mood_recovered_ms=back, mood_recovery_s=max(back - t_rec, 0) / 1000, capped=capped)

            def value_at(t):
                return (hb.filter(pl.col("time_ms") <= t).group_by("golem_id")
                        .agg(pl.col("value").sort_by("time_ms").last()).collect()["value"].sum())
            rec_price = market(d).filter((pl.col("asset") == e["asset"]) & (pl.col("sim_ms") == t_rec)
                                         ).select("close").collect().item()
            units = (who["exposure"] * who["value"] / who["price"]).sum()
            hold_gain = units * (rec_price - e["trough_price"])
            gain = value_at(t_rec) - value_at(e["trough_ms"])
            row["captured_share"] = gain / hold_gain if hold_gain > 0 else None
        rows.append(row)
    schema = dict(ep.schema)
    schema.update(holders=pl.Int64, pre_mood_p=pl.Float64, mood_recovered_ms=pl.Int64, mood_recovery_s=pl.Float64,
                  capped=pl.Boolean, captured_share=pl.Float64, final_value=pl.Float64, final_value_ratio=pl.Float64)
    return pl.LazyFrame(rows, schema=schema)


def _t_coverage(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer `df` degrees of freedom: the closed forms of
    Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df), exact for any df."""
    import math
    th = math.atan(t / math.sqrt(df))
    c2 = math.cos(th) ** 2
    if df % 2:
        term, acc = math.cos(th), 0.0
        for k in range(1, (df - 1) // 2 + 1):        # cos, (2/3) cos^3, (2*4)/(3*5) cos^5, ...
            acc += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (th + math.sin(th) * acc)
    term, acc = 1.0, 0.0
    for k in range(1, df // 2 + 1):                 # 1, (1/2) cos^2, (1*3)/(2*4) cos^4, ...
        acc += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return math.sin(th) * acc


def direction(d: dict) -> str:
    """What a `paired_difference` result shows, in the words notebooks print: 'positive' when its
    interval lies above 0, 'negative' below, 'null' when it contains 0 (or fewer than 2 pairs)."""
    return {"+": "positive", "-": "negative"}.get(d.get("sign"), "null")


def describe(d: dict, fmt: str = "+.3f", scale: float = 1.0) -> str:
    """A `paired_difference` result as the notebooks print it: 'mean [low, high], n = N, <direction>'."""
    if not d.get("n"):
        return "no data (n = 0), null"
    if d.get("low") is None:
        return f"{format(scale * d['mean'], fmt)} (n = {d['n']}: too few for an interval), null"
    return (f"{format(scale * d['mean'], fmt)} [{format(scale * d['low'], fmt)}, {format(scale * d['high'], fmt)}], "
            f"n = {d['n']}, {direction(d)}")


def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| <= t) = level (the half-width factor of a two-sided `level` interval),
    by bisection on the exact coverage; numpy and polars have no t distribution."""
    if not 0 < level < 1 or df < 1:
        raise ValueError(f"t_quantile: expected 0 < level < 1 and df >= 1, got level={level}, df={df}")
    lo, hi = 0.0, 1.0
    while _t_coverage(hi, df) < level:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_coverage(mid, df) < level else (lo, mid)
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def paired_difference(a, b, *, level: float = 0.95) -> dict:
    """a - b over runs paired by seed: `a` and `b` map seed -> value (or are sequences in the same
    seed order). Seeds missing or null (NaN) on either side are left out. Returns n, mean, sd, the
    two-sided `level` t interval (low, high), and sign: '+' when the whole interval is above 0,
    '-' below it, '0' when it contains 0 (no difference shown), None with fewer than 2 pairs."""
    import math
    if not isinstance(a, dict):
        a, b = dict(enumerate(a)), dict(enumerate(b))
    d = [a[k] - b[k] for k in sorted(set(a) & set(b), key=str)
         if a[k] is not None and b[k] is not None and not (math.isnan(a[k]) or math.isnan(b[k]))]
    n = len(d)
    out = dict(n=n, mean=sum(d) / n if n else None, sd=None, low=None, high=None, level=level, sign=None)
    if n >= 2:
        mean = out["mean"]
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
        half = t_quantile(level, n - 1) * sd / math.sqrt(n)
        out.update(sd=sd, low=mean - half, high=mean + half,
                   sign="+" if mean - half > 0 else "-" if mean + half < 0 else "0")
    return out


__all__ = ["run_dirs", "run_names", "market", "scan_table", "scan_runs", "manifest", "clade_names", "chose", "choice_share",
           "retrieval_bias", "mood_congruence",
           "retrieval_valence_bias", "bias_over_time", "lock_in_episodes", "bias_summary", "grimoire_valence_skew",
           "access_counts", "grimoire_map", "golem_pnl", "run_pnl", "contrarian_effect", "contrarian_summary", "golem_clades", "golem_assets",
           "contagion_waves", "contagion_pushes", "contagion_response", "salience_rank_lift",
           "salience_lift_summary", "life_summaries", "pad_bands", "emotion_shares", "holders", "situation_emotions",
           "pinned_share", "regime_spans", "event_counts", "crash_episode", "holder_mood",
           "mood_recovery", "t_quantile", "paired_difference", "direction", "describe"]

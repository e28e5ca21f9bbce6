"""Rendering epoch reports for operators: Rich tables, one-line summaries, metrics rows and a PNG plot.

Everything shown comes from the contract's ``report`` query (``protocol.views.EpochReport``);
nothing here recomputes settlement. Amounts are shown in their display form (``20INJ``;
``protocol.coins``); addresses are shown with the name of the local key that owns them, when
there is one (``names``: address -> name, from the keyring or a simulation's roster).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from protocol.coins import display
from protocol.rules.losses import MICRO
from protocol.rules.spec import PhaseSpec
from protocol.views import EpochReport, HostReport, ValidatorReport, weight

OUTCOME_STYLE = {
    "accepted": "green", "diligent": "green", "pass": "green",
    "invalid": "bold red", "wrong": "bold red", "fail": "bold red",
    "unavailable": "red", "absent": "magenta", "absent_excused": "dim magenta",
    "sat_out": "dim", "no_reveal": "yellow", "silent": "red",
    "excluded": "yellow", "unresolved": "yellow", "unserved": "yellow",
    "pending": "dim", "idle": "dim",
}

# Host outcomes in the plot: every outcome its own colour (colour-blind-safe where possible).
OUTCOME_COLOUR = {
    "accepted": "#009E73", "invalid": "#D55E00", "unavailable": "#E69F00", "absent": "#CC79A7",
    "absent_excused": "#E8C4DA", "sat_out": "#999999", "no_reveal": "#56B4E9", "excluded": "#F0E442",
    "pending": "#BBBBBB",
}

VOTE_MARK = {"pass": "✓", "fail": "✗", "unavailable": "?"}


def challenge_cell(ch: Any) -> str:
    """One challenge as the hosts table shows it: ``segment[T]:outcome[round-0 votes|final votes]``,
    ``T`` on an opened trap, ``!n`` when ``n`` round-0 seats objected (a vote not yet opened is ``·``;
    the final vote shows only on a disputed challenge)."""
    rounds = ["".join(VOTE_MARK.get(v.outcome or "", "·") for v in ch.votes if v.round == r)
              for r in range(ch.rounds + 1)]
    trap = "T" if ch.trap else ""
    objected = f"!{len(ch.objectors)}" if ch.objectors else ""
    return f"{ch.segment}{trap}:{ch.outcome}{objected}[{'|'.join(rounds)}]"


def short(address: str) -> str:
    """``inj19q79m9…adh0``."""
    return f"{address[:10]}…{address[-4:]}"


def who(address: str, names: dict[str, str] | None = None) -> str:
    """The name of ``address`` if it has one, else its short form (for one-line summaries)."""
    if names and address in names:
        return names[address]
    return short(address)


def label(address: str, names: dict[str, str] | None = None) -> str:
    """The name next to the short address, ``alice inj19q79m9…adh0`` (for tables)."""
    if names and address in names:
        return f"{names[address]} {short(address)}"
    return short(address)


def _styled(outcome: str) -> Text:
    return Text(outcome, style=OUTCOME_STYLE.get(outcome, ""))


def _loss(micro: int | None) -> str:
    return "" if micro is None else f"{micro / MICRO:.4f}"


def _gain(gain_micro: int | None) -> str:
    """A probe gain (micro-nats on chain) in nats, signed; empty when the chain recorded none."""
    return "" if gain_micro is None else f"{gain_micro / MICRO:+.4f}"


def _coin(value: str, denom: str) -> str:
    return display(value, denom) if value != "0" else ""


def _stake(member: HostReport | ValidatorReport, denom: str) -> str:
    """Its stake at join, and what it weighs when a slash of the epoch before reached it after it
    joined (pipelined runs)."""
    weighs = f" (weighs {display(member.weight, denom)})" if member.weight is not None else ""
    return display(member.stake, denom) + weighs


def report_tables(report: EpochReport, denom: str, names: dict[str, str] | None = None,
                  phases: PhaseSpec | None = None) -> Group:
    """The hosts table, the validators table and the epoch's totals (with why θ stayed unchanged)."""
    challenges: dict[str, list[str]] = {}
    for ch in report.challenges:
        challenges.setdefault(ch.host, []).append(challenge_cell(ch))
    hosts = Table(title=f"epoch {report.epoch} · phase {report.phase} · hosts", title_justify="left")
    for col in ("host", "stake", "train loss", "probe gain",
                "challenges (segment:outcome!objections\\[round 0|final vote])",
                "outcome", "slashed", "reward", "proposal", "val loss"):
        hosts.add_column(col)
    for h in report.hosts:
        c = h.commitment
        hosts.add_row(label(h.address, names), _stake(h, denom),
                      _loss(c.train_loss_micro) if c else "—", _gain(h.gain_micro),
                      Text(" ".join(challenges.get(h.address, []))),
                      _styled(h.outcome), _coin(h.slashed, denom),
                      _coin(str(int(h.reward) + int(h.catcher_reward)), denom),
                      h.proposal.model_hash[:8] if h.proposal else "",
                      _loss(h.proposal.val_loss_micro) if h.proposal else "")
    validators = Table(title="validators", title_justify="left")
    objections: dict[str, int] = {}
    for ch in report.challenges:
        for a in ch.objectors:
            objections[a] = objections.get(a, 0) + 1
    for col in ("validator", "stake", "assigned", "opened", "objected", "against", "unavailable", "unserved",
                "outcome", "slashed", "reward", "caught"):
        validators.add_column(col)
    for v in report.validators:
        validators.add_row(label(v.address, names), _stake(v, denom), str(v.assigned), str(v.voted),
                           str(objections.get(v.address, 0)), str(v.against), str(v.unavailable), str(v.unserved),
                           _styled(v.outcome), _coin(v.slashed, denom), _coin(v.reward, denom),
                           _coin(v.catcher_reward, denom))
    totals = Text.assemble(
        ("θ_e ", "bold"), report.model_hash[:16], ("  →  θ_e+1 ", "bold"),
        (report.next_model_hash or "—")[:16], f" ({agreement(report.agreed)})\n",
        ("slashed ", "bold"), display(report.slashed_total, denom),
        ("  to catchers ", "bold"), display(report.to_catchers, denom),
        ("  to treasury ", "bold"), display(report.to_treasury, denom),
        ("  rewards ", "bold"), display(report.rewards_total, denom),
    )
    reason = unchanged_reason(report, phases)
    if reason is not None:
        totals.append_text(Text.assemble(("\nθ unchanged: ", "bold yellow"), reason))
    return Group(hosts, validators, totals)


def agreement(agreed: bool | None) -> str:
    """How an epoch's vote on θ_{e+1} stands, in words (never ``None``)."""
    return {True: "agreed", False: "NOT agreed (θ unchanged)", None: "pending"}[agreed]


def unchanged_reason(report: EpochReport, phases: PhaseSpec | None = None) -> str | None:
    """Why a closed epoch left θ unchanged, in words: abandoned for want of members, nobody accepted,
    no proposal, or a split vote (each proposed hash with its share of the accepted stake). None
    while the epoch is open or when θ_{e+1} was agreed.

    Args:
        report: the epoch's report.
        phases: the run's phase spec, for the join minimums of an abandoned epoch.
    """
    if report.abandoned:
        need = (f" (the run needs {phases.min_hosts} host{'s' * (phases.min_hosts != 1)} and "
                f"{phases.min_validators} validator{'s' * (phases.min_validators != 1)}; "
                f"{phases.max_join_extensions} extensions)") if phases else ""
        return (f"abandoned: only {len(report.hosts)} host(s) and {len(report.validators)} validator(s) joined "
                f"before the join phase ran out of extensions{need}")
    if report.agreed is not False:
        return None
    accepted = [h for h in report.hosts if h.outcome == "accepted"]
    if not accepted:
        outcomes: dict[str, int] = {}
        for h in report.hosts:
            outcomes[h.outcome] = outcomes.get(h.outcome, 0) + 1
        seen = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "no host joined"
        return f"no host was accepted ({seen})"
    stake = sum(weight(h) for h in accepted)
    backing: dict[str, int] = {}
    for h in accepted:
        if h.proposal is not None:
            backing[h.proposal.model_hash] = backing.get(h.proposal.model_hash, 0) + weight(h)
    if not backing:
        return (f"none of the {len(accepted)} accepted host(s) proposed θ_{report.epoch + 1} "
                "(their logs say why: a Δ no holder served, a model out of bounds)")
    shares = ", ".join(f"{h[:12]}… {100 * b / stake:.0f} %" for h, b in
                       sorted(backing.items(), key=lambda kv: (-kv[1], kv[0])))
    silent = stake - sum(backing.values())
    rest = f", no proposal {100 * silent / stake:.0f} %" if silent else ""
    return f"no θ_{report.epoch + 1} was backed by more than 2/3 of the accepted stake ({shares}{rest})"


def best_val_loss(report: EpochReport) -> float | None:
    """The validation loss of the agreed next model, as proposed by the hosts that agreed on it."""
    losses = [h.proposal.val_loss_micro for h in report.hosts
              if h.proposal is not None and h.proposal.model_hash == report.next_model_hash]
    return min(losses) / MICRO if losses else None


def mean_train_loss(report: EpochReport) -> float | None:
    """The mean committed train loss (last segment) of the accepted hosts."""
    losses = [h.commitment.train_loss_micro for h in report.hosts
              if h.commitment is not None and h.outcome == "accepted"]
    return sum(losses) / len(losses) / MICRO if losses else None


def summary_line(report: EpochReport, names: dict[str, str] | None = None, phases: PhaseSpec | None = None) -> str:
    """One line per epoch: outcomes, slashes and the agreed model's validation loss (or why θ stayed)."""
    val = best_val_loss(report)
    hosts = sorted(report.hosts, key=lambda h: who(h.address, names))
    outcomes = ", ".join(f"{who(h.address, names)} {h.outcome}" for h in hosts)
    slashed = [who(h.address, names) for h in report.hosts if h.slashed != "0"]
    slashed += [who(v.address, names) for v in report.validators if v.slashed != "0"]
    return (f"epoch {report.epoch}: {outcomes}; slashed: {', '.join(slashed) or 'nobody'}; "
            f"val loss of θ_{report.epoch + 1} {'—' if val is None else f'{val:.4f}'}; "
            f"θ {'agreed' if report.agreed else 'unchanged'}"
            + (f" ({reason})" if (reason := unchanged_reason(report, phases)) else ""))


def slashed_over_run(reports: Sequence[EpochReport], denom: str, names: dict[str, str] | None = None) -> str:
    """Who was slashed across several epochs, how much in all and in how many epochs, e.g.
    ``host-4 (noise) 15INJ in 2 epochs``; ``nobody`` if nobody was."""
    total: dict[str, int] = {}
    epochs: dict[str, int] = {}
    for report in reports:
        members: list[HostReport | ValidatorReport] = [*report.hosts, *report.validators]
        for member in members:
            if member.slashed != "0":
                total[member.address] = total.get(member.address, 0) + int(member.slashed)
                epochs[member.address] = epochs.get(member.address, 0) + 1
    parts = [f"{who(a, names)} {display(total[a], denom)} in {epochs[a]} epoch{'s' * (epochs[a] > 1)}"
             for a in sorted(total, key=lambda a: who(a, names))]
    return ", ".join(parts) or "nobody"


EPOCH_COLUMNS = ["epoch", "phase", "agreed", "unchanged_reason", "model_hash", "next_model_hash",
                 "val_loss_next", "train_loss_accepted", "hosts", "accepted", "validators", "slashed_total",
                 "to_catchers", "to_treasury", "rewards_total", "denom"]
MEMBER_COLUMNS = ["epoch", "role", "address", "name", "stake", "weight", "outcome", "train_loss", "val_loss",
                  "assigned", "voted", "against", "unavailable", "unserved", "slashed", "reward", "catcher_reward",
                  "denom"]


def epoch_rows(reports: Sequence[EpochReport], denom: str) -> list[dict[str, Any]]:
    """One row per epoch (columns :data:`EPOCH_COLUMNS`): losses, counts and money; amounts in base units.

    ``val_loss_next`` is the validation loss of θ_{e+1}, the model epoch ``e`` produced.
    """
    return [{"epoch": r.epoch, "phase": r.phase, "agreed": "" if r.agreed is None else r.agreed,
             "unchanged_reason": unchanged_reason(r) or "",
             "model_hash": r.model_hash, "next_model_hash": r.next_model_hash or "",
             "val_loss_next": _opt(best_val_loss(r)), "train_loss_accepted": _opt(mean_train_loss(r)),
             "hosts": len(r.hosts), "accepted": sum(h.outcome == "accepted" for h in r.hosts),
             "validators": len(r.validators), "slashed_total": r.slashed_total, "to_catchers": r.to_catchers,
             "to_treasury": r.to_treasury, "rewards_total": r.rewards_total, "denom": denom}
            for r in reports]


def member_rows(reports: Sequence[EpochReport], denom: str,
                names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per member and epoch (columns :data:`MEMBER_COLUMNS`); amounts in base units.

    ``weight`` is what the member weighed in the epoch's votes (:func:`protocol.views.weight`):
    its stake at join unless a slash of the epoch before cut it (issue 27)."""
    rows: list[dict[str, Any]] = []
    for r in reports:
        for h in r.hosts:
            rows.append({"epoch": r.epoch, "role": "host", "address": h.address,
                         "name": (names or {}).get(h.address, ""),
                         "stake": h.stake, "weight": weight(h), "outcome": h.outcome,
                         "train_loss": _opt(h.commitment.train_loss_micro / MICRO if h.commitment else None),
                         "val_loss": _opt(h.proposal.val_loss_micro / MICRO if h.proposal else None),
                         "assigned": "", "voted": "", "against": "", "unavailable": "", "unserved": "",
                         "slashed": h.slashed,
                         "reward": h.reward, "catcher_reward": h.catcher_reward, "denom": denom})
        for v in r.validators:
            rows.append({"epoch": r.epoch, "role": "validator", "address": v.address,
                         "name": (names or {}).get(v.address, ""), "stake": v.stake, "weight": weight(v),
                         "outcome": v.outcome,
                         "train_loss": "", "val_loss": "", "assigned": v.assigned, "voted": v.voted,
                         "against": v.against, "unavailable": v.unavailable, "unserved": v.unserved,
                         "slashed": v.slashed, "reward": v.reward,
                         "catcher_reward": v.catcher_reward, "denom": denom})
    return rows


def _opt(value: float | None) -> str | float:
    return "" if value is None else round(value, 6)


def loss_points(reports: Sequence[EpochReport]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """What the loss plot draws: (epoch, validation loss of θ_epoch) for every agreed model after θ_0
    — θ_{e+1} at ``e + 1`` —, and (epoch, the accepted hosts' mean train loss in that epoch)."""
    val = [(r.epoch + 1, v) for r in reports if (v := best_val_loss(r)) is not None]
    train = [(r.epoch, v) for r in reports if (v := mean_train_loss(r)) is not None]
    return val, train


def plot_reports(reports: Sequence[EpochReport], path: Path, names: dict[str, str] | None = None) -> Path:
    """Losses per epoch and each host's outcome per epoch, as a PNG.

    The x axis counts epochs: the train loss of epoch ``e`` (trained from θ_e) is drawn at ``e``,
    the validation loss of θ_{e+1} — the model epoch ``e`` produced — at ``e + 1``. Legends sit
    below their plots, so they never cover a point.
    """
    import matplotlib  # noqa: PLC0415 (matplotlib loads only when a plot is asked for)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (after choosing the backend)

    hosts = sorted({h.address for r in reports for h in r.hosts}, key=lambda a: who(a, names))
    fig, (ax_loss, ax_hosts) = plt.subplots(1, 2, figsize=(12, 4.8 + 0.18 * max(0, len(hosts) - 6)),
                                            gridspec_kw={"width_ratios": [1.2, 1]})
    val, train = loss_points(reports)
    if val:
        ax_loss.plot([e for e, _ in val], [v for _, v in val], marker="o", label="validation loss of θ_e (agreed)")
    if train:
        ax_loss.plot([e for e, _ in train], [v for _, v in train], marker="s", linestyle="--",
                     label="train loss in epoch e, last segment (accepted hosts)")
    ax_loss.set_xlabel("epoch e")
    ax_loss.set_ylabel("nats/byte")
    ax_loss.set_title("loss")
    ax_loss.grid(alpha=0.3)
    epochs = [r.epoch for r in reports]
    if epochs:
        ax_loss.set_xticks(range(min(epochs), max(epochs) + 2))
        ax_loss.set_xlim(min(epochs) - 0.5, max(epochs) + 1.5)
    if val or train:
        ax_loss.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    seen: set[str] = set()
    for r in reports:
        for h in r.hosts:
            seen.add(h.outcome)
            ax_hosts.scatter(r.epoch, hosts.index(h.address), s=160, marker="s",
                             color=OUTCOME_COLOUR.get(h.outcome, "gray"), edgecolors="black", linewidths=0.5)
    ax_hosts.set_yticks(range(len(hosts)), [who(a, names) for a in hosts])
    ax_hosts.set_ylim(-0.7, max(len(hosts), 1) - 0.3)
    ax_hosts.set_xlabel("epoch e")
    ax_hosts.set_title("host outcomes")
    if epochs:
        ax_hosts.set_xticks(epochs)
        ax_hosts.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
    for outcome, colour in OUTCOME_COLOUR.items():
        if outcome in seen:
            ax_hosts.scatter([], [], s=80, marker="s", color=colour, edgecolors="black", linewidths=0.5,
                             label=outcome)
    if seen:
        ax_hosts.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path

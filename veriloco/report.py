"""Rendering epoch reports for operators: Rich tables, a one-line summary, and a PNG plot.

Everything shown comes from the contract's ``report`` query (``protocol.views.EpochReport``);
nothing here recomputes settlement. Amounts are shown in whole tokens when the denom has 18
decimals (``inj``), otherwise in base units.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from protocol.injective import DENOM_DECIMALS
from protocol.rules.losses import MICRO
from protocol.views import EpochReport, HostReport, ValidatorReport

OUTCOME_STYLE = {
    "accepted": "green", "diligent": "green", "pass": "green",
    "invalid": "bold red", "wrong": "bold red", "fail": "bold red",
    "unavailable": "red", "absent": "red", "no_reveal": "red", "silent": "red",
    "inconclusive": "yellow", "pending": "dim", "idle": "dim",
}


def amount(value: str | int, denom: str) -> str:
    """``1500000000000000000`` inj -> ``1.5 INJ``; other denoms in base units."""
    decimals = DENOM_DECIMALS.get(denom)
    if decimals is None:
        return f"{value} {denom}"
    whole = Decimal(int(value)) / Decimal(10) ** decimals
    text = f"{whole:.6f}".rstrip("0").rstrip(".")
    return f"{text} {denom.upper()}"


def short(address: str, names: dict[str, str] | None = None) -> str:
    if names and address in names:
        return names[address]
    return f"{address[:10]}…{address[-4:]}"


def _styled(outcome: str) -> Text:
    return Text(outcome, style=OUTCOME_STYLE.get(outcome, ""))


def _loss(micro: int | None) -> str:
    return "" if micro is None else f"{micro / MICRO:.4f}"


def report_tables(report: EpochReport, denom: str, names: dict[str, str] | None = None) -> Group:
    """The hosts table, the validators table and the epoch's totals."""
    challenges: dict[str, list[str]] = {}
    for ch in report.challenges:
        votes = "".join({"pass": "✓", "fail": "✗", "unavailable": "?"}.get(v.outcome or "", "·") for v in ch.votes)
        challenges.setdefault(ch.host, []).append(f"{ch.segment}:{ch.outcome}[{votes}]")
    hosts = Table(title=f"epoch {report.epoch} · phase {report.phase} · hosts", title_justify="left")
    for col in ("host", "stake", "train loss", "challenges (segment:outcome\\[votes])", "outcome",
                "slashed", "reward", "proposal", "val loss"):
        hosts.add_column(col)
    for h in report.hosts:
        c = h.commitment
        hosts.add_row(short(h.address, names), amount(h.stake, denom),
                      _loss(c.train_loss_micro) if c else "—", Text(" ".join(challenges.get(h.address, []))),
                      _styled(h.outcome), amount(h.slashed, denom) if h.slashed != "0" else "",
                      amount(h.reward, denom) if h.reward != "0" else "",
                      h.proposal.model_hash[:8] if h.proposal else "",
                      _loss(h.proposal.val_loss_micro) if h.proposal else "")
    validators = Table(title="validators", title_justify="left")
    for col in ("validator", "stake", "assigned", "voted", "against", "outcome", "slashed",
                "reward", "caught"):
        validators.add_column(col)
    for v in report.validators:
        validators.add_row(short(v.address, names), amount(v.stake, denom), str(v.assigned), str(v.voted),
                           str(v.against_majority), _styled(v.outcome),
                           amount(v.slashed, denom) if v.slashed != "0" else "",
                           amount(v.reward, denom) if v.reward != "0" else "",
                           amount(v.catcher_reward, denom) if v.catcher_reward != "0" else "")
    agreed = {True: "agreed", False: "NOT agreed (θ unchanged)", None: "pending"}[report.agreed]
    totals = Text.assemble(
        ("θ_e ", "bold"), report.model_hash[:16], ("  →  θ_e+1 ", "bold"),
        (report.next_model_hash or "—")[:16], f" ({agreed})\n",
        ("slashed ", "bold"), amount(report.slashed_total, denom),
        ("  to catchers ", "bold"), amount(report.to_catchers, denom),
        ("  to treasury ", "bold"), amount(report.to_treasury, denom),
        ("  rewards ", "bold"), amount(report.rewards_total, denom),
    )
    return Group(hosts, validators, totals)


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


def summary_line(report: EpochReport, names: dict[str, str] | None = None) -> str:
    """One line per epoch: outcomes, slashes and the agreed model's validation loss."""
    val = best_val_loss(report)
    hosts = sorted(report.hosts, key=lambda h: short(h.address, names))
    outcomes = ", ".join(f"{short(h.address, names)} {h.outcome}" for h in hosts)
    slashed = [short(h.address, names) for h in report.hosts if h.slashed != "0"]
    slashed += [short(v.address, names) for v in report.validators if v.slashed != "0"]
    return (f"epoch {report.epoch}: {outcomes}; slashed: {', '.join(slashed) or 'nobody'}; "
            f"val loss {'—' if val is None else f'{val:.4f}'}; θ {'agreed' if report.agreed else 'unchanged'}")


def slashed_over_run(reports: Sequence[EpochReport], denom: str, names: dict[str, str] | None = None) -> str:
    """Who was slashed across several epochs, how much in all and in how many epochs, e.g.
    ``host-4 (noise) 15 INJ in 2 epochs``; ``nobody`` if nobody was."""
    total: dict[str, int] = {}
    epochs: dict[str, int] = {}
    for report in reports:
        members: list[HostReport | ValidatorReport] = [*report.hosts, *report.validators]
        for member in members:
            if member.slashed != "0":
                total[member.address] = total.get(member.address, 0) + int(member.slashed)
                epochs[member.address] = epochs.get(member.address, 0) + 1
    parts = [f"{short(a, names)} {amount(total[a], denom)} in {epochs[a]} epoch{'s' * (epochs[a] > 1)}"
             for a in sorted(total, key=lambda a: short(a, names))]
    return ", ".join(parts) or "nobody"


def plot_reports(reports: Sequence[EpochReport], path: Path, names: dict[str, str] | None = None) -> Path:
    """Validation loss of the agreed model per epoch, and each host's outcome per epoch, as a PNG."""
    import matplotlib  # noqa: PLC0415 (matplotlib loads only when a plot is asked for)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (after choosing the backend)

    fig, (ax_loss, ax_hosts) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1.2, 1]})
    points = [(r.epoch, best_val_loss(r)) for r in reports]
    points = [(e, v) for e, v in points if v is not None]
    if points:
        ax_loss.plot([e for e, _ in points], [v for _, v in points], marker="o", label="validation loss of θ_e+1")
    train = [(r.epoch, mean_train_loss(r)) for r in reports]
    train = [(e, v) for e, v in train if v is not None]
    if train:
        ax_loss.plot([e for e, _ in train], [v for _, v in train], marker="s", linestyle="--",
                     label="train loss, last segment (accepted hosts)")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("nats/byte")
    ax_loss.set_title("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize="small")
    if reports:
        ax_loss.set_xticks([r.epoch for r in reports])
    hosts = sorted({h.address for r in reports for h in r.hosts})
    colors = {"accepted": "tab:green", "invalid": "tab:red", "unavailable": "tab:orange",
              "absent": "tab:orange", "no_reveal": "tab:orange", "inconclusive": "gold", "pending": "lightgray"}
    for r in reports:
        for h in r.hosts:
            y = hosts.index(h.address)
            ax_hosts.scatter(r.epoch, y, s=160, marker="s", color=colors.get(h.outcome, "gray"))
    ax_hosts.set_yticks(range(len(hosts)), [short(a, names) for a in hosts])
    ax_hosts.set_xlabel("epoch")
    ax_hosts.set_title("host outcomes")
    for outcome, color in colors.items():
        ax_hosts.scatter([], [], marker="s", color=color, label=outcome)
    ax_hosts.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    if reports:
        ax_hosts.set_xticks([r.epoch for r in reports])
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

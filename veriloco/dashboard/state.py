"""What the dashboard shows, as one document (``/api/state``), built from what the chain says.

:func:`build_state` is pure: the source (``.source``) does the reads and hands it the run's
spec, the current epoch and height, every epoch's report, the members, the contract's accounts and
its bank balance. Amounts travel as base-unit strings with their display form beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from protocol.coins import display
from protocol.rules.spec import RunSpec
from protocol.views import Accounting, EpochInfo, EpochReport, Member
from veriloco.output import SCHEMA_VERSION
from veriloco.phase_progress import PhaseProgress, phase_progress
from veriloco.report import best_val_loss, mean_train_loss, unchanged_reason


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Coin(Strict):
    base: str
    shown: str


class RunInfo(Strict):
    name: str
    run_id: str
    contract: str
    chain: str
    model: str
    inner_steps: int
    segments: int
    challenges_k: int
    seats_cap: int
    rule: str
    denom: str


class EpochRow(Strict):
    epoch: int
    phase: str
    hosts: int
    accepted: int
    validators: int
    agreed: bool | None
    val_loss_next: float | None
    train_loss: float | None
    slashed: Coin
    rewards: Coin
    note: str | None
    """Why θ stayed the same, when it did."""


class Outcome(Strict):
    name: str
    address: str
    role: str
    outcome: str
    stake: Coin
    weight: Coin | None = None
    """What it weighed in the epoch when below ``stake`` (a pipelined run's slash of the epoch
    before reached it after it joined: docs/contract.md, "Pipelined epochs"); None: its stake."""
    slashed: Coin
    reward: Coin


class MemberRow(Strict):
    name: str
    address: str
    role: str
    bonded: Coin
    unbonding: Coin
    slashed_total: Coin
    rewarded_total: Coin


class Funds(Strict):
    bonded: Coin
    unbonding: Coin
    reward_pool: Coin
    held: Coin
    contract_balance: Coin
    balanced: bool
    """The contract's accounts add up to its bank balance."""
    slashed_over_run: Coin
    rewards_over_run: Coin


class DashboardState(Strict):
    schema_version: int = SCHEMA_VERSION
    run: RunInfo
    now: PhaseProgress
    epochs: list[EpochRow]
    outcomes_epoch: int | None
    """The epoch :attr:`outcomes` are of: the newest with a decided outcome."""
    outcomes: list[Outcome]
    members: list[MemberRow]
    funds: Funds
    updated: float
    """When the chain was read (Unix seconds)."""


def build_state(*, spec: RunSpec, contract: str, chain: str, current: EpochInfo, height: int,
                seconds_per_block: float | None, reports: Sequence[EpochReport], members: Sequence[Member],
                accounting: Accounting, contract_balance: int, names: dict[str, str], updated: float) -> DashboardState:
    """The dashboard's document (see the module docstring)."""
    denom = spec.economics.denom

    def coin(value: int | str) -> Coin:
        return Coin(base=str(value), shown=display(int(value), denom))

    def name(address: str) -> str:
        return names.get(address, "")

    ordered = sorted(reports, key=lambda r: r.epoch)
    epochs = [EpochRow(epoch=r.epoch, phase=r.phase, hosts=len(r.hosts),
                       accepted=sum(h.outcome == "accepted" for h in r.hosts), validators=len(r.validators),
                       agreed=r.agreed, val_loss_next=best_val_loss(r), train_loss=mean_train_loss(r),
                       slashed=coin(r.slashed_total), rewards=coin(r.rewards_total),
                       note=unchanged_reason(r, spec.phases)) for r in ordered]
    decided = [r for r in ordered if any(h.outcome != "pending" for h in r.hosts)
               or any(v.outcome != "pending" for v in r.validators)]
    latest = decided[-1] if decided else None
    outcomes: list[Outcome] = []
    if latest is not None:
        outcomes = [Outcome(name=name(p.address), address=p.address, role=role, outcome=p.outcome,
                            stake=coin(p.stake), weight=None if p.weight is None else coin(p.weight),
                            slashed=coin(p.slashed), reward=coin(int(p.reward) + int(p.catcher_reward)))
                    for role, part in (("host", latest.hosts), ("validator", latest.validators)) for p in part]
    rows = [MemberRow(name=name(m.address), address=m.address, role=m.role, bonded=coin(m.bonded),
                      unbonding=coin(sum(int(u.amount) for u in m.unbonding)), slashed_total=coin(m.slashed_total),
                      rewarded_total=coin(m.rewarded_total)) for m in members]
    held = int(accounting.bonded) + int(accounting.unbonding) + int(accounting.reward_pool)
    funds = Funds(bonded=coin(accounting.bonded), unbonding=coin(accounting.unbonding),
                  reward_pool=coin(accounting.reward_pool), held=coin(held), contract_balance=coin(contract_balance),
                  balanced=held == contract_balance,
                  slashed_over_run=coin(sum(int(r.slashed_total) for r in ordered)),
                  rewards_over_run=coin(sum(int(r.rewards_total) for r in ordered)))
    run = RunInfo(name=spec.name, run_id=spec.run_id().hex(), contract=contract, chain=chain,
                  model=f"{spec.model.architecture} {dict(spec.model.params)}", inner_steps=spec.train.inner_steps,
                  segments=spec.train.segments, challenges_k=spec.verification.challenges_k,
                  seats_cap=spec.verification.seats_cap, rule=spec.aggregation.rule, denom=denom)
    return DashboardState(run=run, now=phase_progress(current, height, spec.phases, seconds_per_block,
                                                                 spec.verification.delay_blocks), epochs=epochs,
                          outcomes_epoch=None if latest is None else latest.epoch, outcomes=outcomes, members=rows,
                          funds=funds, updated=updated)

"""Run spec and messages: strict validation with clear messages; canonical form; stable run id."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from protocol.messages import Commitment, ModelProposal, Verdict
from protocol.rules.encoding import EncodingError
from protocol.rules.limits import BPS_DENOMINATOR, MAX_LOSS_MICRO, MIN_STAKE
from protocol.rules.losses import loss_digest, loss_micro, train_loss_micro
from protocol.rules.spec import DataSpec, EconomicsSpec, ModelSpec, RunSpec, TrainSpec, parse_quant_schedule


def make_spec(**changes) -> RunSpec:
    spec = RunSpec(
        name="test-run",
        model=ModelSpec(params={"n_layer": 1, "d_model": 32}),
        data=DataSpec(corpus="shakespeare", dataset_hash="ab" * 32, seq_len=32),
        train=TrainSpec(inner_steps=20, segment_steps=5, batch_size=4, lr="3e-3"),
        economics=EconomicsSpec(denom="inj", min_host_stake="2000000", min_validator_stake="1000000"),
    )
    return spec.with_changes(**changes) if changes else spec


def test_canonical_round_trip_and_run_id() -> None:
    spec = make_spec()
    assert RunSpec.from_canonical(spec.canonical()) == spec
    assert spec.run_id() == make_spec().run_id()
    assert spec.run_id() != make_spec(train={"seed": 1}).run_id()
    # How many windows a proposal's loss is scored on is part of the run: hosts of one run agree on it.
    assert spec.data.val_windows == 512
    assert spec.run_id() != make_spec(data={"val_windows": 128}).run_id()
    assert spec.train.segments == 4


def test_the_miss_window_is_omitted_at_its_default_and_bounded_by_what_a_member_record_keeps() -> None:
    # economics.miss_window_epochs (W, docs/contract.md "Absences"): omitted from the canonical JSON
    # at its default 8, so run ids from before the field stay; spelled out otherwise.
    plain = make_spec()
    assert plain.economics.miss_window_epochs == 8 and b"miss_window_epochs" not in plain.canonical()
    wide = make_spec(economics={"miss_window_epochs": 64})
    assert b'"miss_window_epochs":64' in wide.canonical() and wide.run_id() != plain.run_id()
    assert RunSpec.from_canonical(wide.canonical()) == wide
    spelled = plain.canonical().replace(b'"reward_per_epoch"', b'"miss_window_epochs":8,"reward_per_epoch"')
    with pytest.raises(EncodingError, match="default-omitted field is spelled out"):
        RunSpec.from_canonical(spelled)
    for bad in (0, 65):
        with pytest.raises(ValidationError, match="miss_window_epochs"):
            make_spec(economics={"miss_window_epochs": bad})


def test_non_canonical_spec_bytes_refused() -> None:
    text = spec_text = make_spec().canonical().decode()
    with pytest.raises(EncodingError):
        RunSpec.from_canonical(text.replace('"version":1', '"version": 1'))
    assert spec_text.startswith("{")


@pytest.mark.parametrize("changes, message", [
    ({"train": {"segment_steps": 3}}, "multiple of segment_steps"),
    ({"train": {"lr": 0.001}}, "floats are ambiguous"),
    ({"train": {"lr": "-1"}}, "lr must be positive"),
    ({"train": {"beta2": "1"}}, "beta2 must be in"),
    ({"economics": {"min_host_stake": "-5"}}, "not an integer"),
    ({"economics": {"min_host_stake": str(2**128)}}, "not an integer"),
    ({"economics": {"slash_invalid_bps": 10_001}}, "less than or equal to 10000"),
    ({"economics": {"denom": "x"}}, "denom must be"),
    ({"economics": {"min_host_stake": "999999"}}, r"min_host_stake \(999999\) must be at least 1000000 base units"),
    ({"economics": {"min_validator_stake": "0"}}, r"min_validator_stake \(0\) must be at least 1000000"),
    ({"economics": {"reward_per_epoch": "10000000"}},
     r"min_host_stake \(2000000\) must be at least the hosts' part of reward_per_epoch \(8000000\): one host could"),
    ({"economics": {"reward_per_epoch": "10000000", "min_host_stake": "8000000"}},
     r"min_validator_stake \(1000000\) must be at least the validators' part of reward_per_epoch \(2000000\)"),
    ({"name": "Has Spaces"}, "run names"),
    ({"model": {"factory": "subprocess:run"}}, "Extra inputs are not permitted"),
    ({"model": {"architecture": "subprocess:run"}}, "unknown model architecture"),
    ({"model": {"params": {"n_head": 5}}}, "multiple of n_head"),
    ({"data": {"dataset_hash": "AB" * 32}}, "64 lowercase hex"),
    ({"data": {"val_windows": 0}}, "greater than or equal to 1"),
    ({"data": {"val_windows": 65_537}}, "less than or equal to 65536"),
    ({"data": {"val_windows": "128"}}, "valid integer"),
    ({"verification": {"validators_r": 0}}, "validators_r must be >= 1"),
    ({"verification": {"compute_fingerprint": "AB" * 32}}, "should match pattern"),
    ({"verification": {"compute_fingerprint": "ab" * 31}}, "should match pattern"),
    ({"verification": {"compute_fingerprint": None}}, "valid string"),
    ({"phases": {"min_hosts": 5, "max_hosts": 2}}, "must not exceed"),
    ({"outer": {"momentum": "1.0"}}, "momentum must be in"),
    ({"aggregation": {"rule": "mode"}}, "Input should be"),
    ({"unknown_section": {}}, "Extra inputs are not permitted"),
])
def test_bad_specs_rejected_with_clear_message(changes, message) -> None:
    with pytest.raises(ValidationError, match=message):
        make_spec(**changes)


amounts = st.one_of(st.integers(0, 3 * MIN_STAKE), st.integers(0, 2**95))


@given(host=amounts, validator=amounts, reward=amounts, bps=st.integers(0, BPS_DENOMINATOR),
       at_bound=st.sampled_from([None, -1, 0, 1]))
def test_economics_are_accepted_iff_no_minimum_stake_is_below_the_floor_or_its_roles_reward(
        host: int, validator: int, reward: int, bps: int, at_bound: int | None) -> None:
    # The rule (docs/network.md): each minimum stake at least MIN_STAKE and at least the most one
    # member of its role can earn from an epoch's reward (its role's whole part of it).
    hosts_part = reward * bps // BPS_DENOMINATOR
    if at_bound is not None:
        validator = max(0, max(MIN_STAKE, reward - hosts_part) + at_bound)
    fields = {"denom": "inj", "min_host_stake": str(host), "min_validator_stake": str(validator),
              "reward_per_epoch": str(reward), "host_reward_share_bps": bps}
    holds = host >= max(MIN_STAKE, hosts_part) and validator >= max(MIN_STAKE, reward - hosts_part)
    try:
        econ = EconomicsSpec.model_validate(fields)
    except ValidationError as e:
        assert not holds, e
        assert "min_host_stake" in str(e) or "min_validator_stake" in str(e)
    else:
        assert holds
        assert econ.reward_parts() == (hosts_part, reward - hosts_part)


def test_commitment_and_verdict_validation() -> None:
    ok = Commitment(epoch=0, checkpoint_root="00" * 32, delta_hash="11" * 32, loss_digest="22" * 32,
                    segments=4, train_loss_micro=2_500_000)
    assert ok.segments == 4
    with pytest.raises(ValidationError):
        Commitment(**{**ok.model_dump(), "segments": 0})
    with pytest.raises(ValidationError):
        Commitment(**{**ok.model_dump(), "segments": "4"})
    host = "inj1tp7fhly84qm6q4hhzmp0nh5frtdugmyskr53z3"
    v = Verdict(epoch=0, host=host, segment=1, outcome="fail", distance="0.123456789123", evidence="33" * 32)
    assert v.model_dump(mode="json")["distance"] == "0.123456789"
    with pytest.raises(ValidationError, match="bech32"):
        Verdict(epoch=0, host="inj1nothing", segment=1, outcome="pass", evidence="33" * 32)
    with pytest.raises(ValidationError):
        Verdict(epoch=0, host=host, segment=1, outcome="maybe", evidence="33" * 32)


def test_reported_losses_are_bounded() -> None:
    ok = Commitment(epoch=0, checkpoint_root="00" * 32, delta_hash="11" * 32, loss_digest="22" * 32,
                    segments=4, train_loss_micro=MAX_LOSS_MICRO)
    for bad in (MAX_LOSS_MICRO + 1, -1):
        with pytest.raises(ValidationError):
            Commitment(**{**ok.model_dump(), "train_loss_micro": bad})
        with pytest.raises(ValidationError):
            ModelProposal(epoch=0, model_hash="00" * 32, val_loss_micro=bad)
    assert ModelProposal(epoch=0, model_hash="00" * 32, val_loss_micro=MAX_LOSS_MICRO).val_loss_micro == MAX_LOSS_MICRO


def test_the_train_loss_follows_from_the_committed_losses() -> None:
    assert train_loss_micro([10, 20, 30, 41], 2) == 36  # the last segment: (30 + 41) / 2 = 35.5 -> 36
    assert train_loss_micro([1, 2], 2) == 2 and train_loss_micro([1, 4], 2) == 2  # halves to even
    assert train_loss_micro([3, 4, 4], 3) == 4  # 11 / 3 = 3.67
    assert train_loss_micro([-9, -3], 2) == 0 and train_loss_micro([2**40, 2**40], 2) == MAX_LOSS_MICRO
    for bad in (([1], 2), ([1, 2], 0)):
        with pytest.raises(ValueError):
            train_loss_micro(*bad)


def test_loss_fixed_point() -> None:
    assert loss_micro(2.5) == 2_500_000 and loss_micro(1e-7) == 0
    with pytest.raises(ValueError):
        loss_micro(float("nan"))
    assert loss_digest([1, 2]) != loss_digest([2, 1]) != loss_digest([1, 2, 0])


def test_a_quantization_schedule_picks_the_scheme_by_epoch_and_keeps_old_run_ids() -> None:
    plain = make_spec()
    # Absent from the canonical JSON when empty: run ids of specs from before the field stay.
    assert b"schedule" not in plain.canonical()
    assert plain.for_epoch(7) is plain
    steps = [{"from_epoch": 2, "scheme": "topk2", "block_size": 1024},
             {"from_epoch": 5, "scheme": "topk2", "block_size": 4096}]
    spec = make_spec(quantization={"scheme": "int8", "block_size": 64, "schedule": steps})
    assert spec.run_id() != plain.run_id() and RunSpec.from_canonical(spec.canonical()) == spec
    assert [(spec.quantization.at(e).scheme, spec.quantization.at(e).block_size) for e in range(7)] == [
        ("int8", 64), ("int8", 64), ("topk2", 1024), ("topk2", 1024), ("topk2", 1024), ("topk2", 4096),
        ("topk2", 4096)]
    resolved = spec.for_epoch(3)
    assert resolved.quantization.scheme == "topk2" and resolved.quantization.schedule == ()
    assert resolved.train == spec.train and resolved.run_id() != spec.run_id()  # hence: the deployed spec's
    assert parse_quant_schedule("int8@0,topk2@2,topk2/4096@5") == spec.quantization


@pytest.mark.parametrize("schedule, message", [
    ([{"from_epoch": 3, "scheme": "topk2", "block_size": 1024}, {"from_epoch": 3, "scheme": "topk2",
                                                                  "block_size": 2048}], "must increase strictly"),
    ([{"from_epoch": 0, "scheme": "topk2", "block_size": 1024}], "greater than or equal to 1"),
    ([{"from_epoch": 1, "scheme": "topk3", "block_size": 1024}], "Input should be"),
    ([{"from_epoch": 1, "scheme": "topk2", "block_size": 1000}], "multiple of 256"),
    ([{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}, {"from_epoch": 4, "scheme": "int8",
                                                                  "block_size": 64}], "drop the error-feedback"),
    ([{"from_epoch": e, "scheme": "int8", "block_size": 64} for e in range(1, 18)], "at most 16"),
])
def test_bad_quantization_schedules_are_refused(schedule, message) -> None:
    with pytest.raises(ValidationError, match=message):
        make_spec(quantization={"scheme": "int8", "block_size": 64, "schedule": schedule})


@pytest.mark.parametrize("text, message", [
    ("topk2@1", "must start at epoch 0"),
    ("int8@0,topk2:1024@3", "is not SCHEME"),
    ("int8@0,topk2@3,int4@5", "drop the error-feedback"),
])
def test_bad_schedule_text_is_refused(text, message) -> None:
    with pytest.raises(ValueError, match=message):
        parse_quant_schedule(text)


def test_the_error_decay_is_omitted_at_one_carried_to_topk2_epochs_and_bounded() -> None:
    # quantization.error_decay (β of topk2's error feedback): absent from the canonical JSON at 1, so
    # every run id from before the field stays, int8 ones included; spelled out otherwise.
    sparse = make_spec(quantization={"scheme": "topk2", "block_size": 1024})
    assert sparse.quantization.error_decay == 1 and b"error_decay" not in sparse.canonical()
    assert make_spec(quantization={"scheme": "topk2", "block_size": 1024, "error_decay": "1.00"}).run_id() == \
        sparse.run_id()
    decayed = make_spec(quantization={"scheme": "topk2", "block_size": 1024, "error_decay": "0.9"})
    assert b'"error_decay":"0.9"' in decayed.canonical() and decayed.run_id() != sparse.run_id()
    assert RunSpec.from_canonical(decayed.canonical()) == decayed
    spelled = sparse.canonical().replace(b'"block_size":1024', b'"block_size":1024,"error_decay":"1"')
    with pytest.raises(EncodingError, match="default-omitted field is spelled out"):
        RunSpec.from_canonical(spelled)
    # A schedule's topk2 epochs get the run's β, its dense ones none (they carry no residual).
    steps = [{"from_epoch": 2, "scheme": "topk2", "block_size": 1024}]
    scheduled = make_spec(quantization={"scheme": "int8", "block_size": 64, "schedule": steps, "error_decay": "0.8"})
    assert [str(scheduled.for_epoch(e).quantization.error_decay) for e in range(4)] == ["1", "1", "0.8", "0.8"]


@pytest.mark.parametrize("quant, message", [
    ({"scheme": "topk2", "block_size": 1024, "error_decay": "1.01"}, r"error_decay must be in \[0, 1\]"),
    ({"scheme": "topk2", "block_size": 1024, "error_decay": "-0.1"}, r"error_decay must be in \[0, 1\]"),
    ({"scheme": "topk2", "block_size": 1024, "error_decay": 0.9}, "floats are ambiguous"),
    ({"scheme": "topk2", "block_size": 1024, "error_decay": "nan"}, "not a decimal string"),
    ({"scheme": "int8", "block_size": 64, "error_decay": "0.9"}, "applies to topk2 only"),
])
def test_bad_error_decays_are_refused(quant, message) -> None:
    with pytest.raises(ValidationError, match=message):
        make_spec(quantization=quant)


def test_the_delayed_seed_is_omitted_at_zero_and_bounded() -> None:
    # verification.delay_squarings (docs/contract.md "The delayed seed"): 0 keeps every run id.
    plain = make_spec()
    delayed = make_spec(verification={"delay_squarings": 1000})
    assert b"delay_squarings" not in plain.canonical()
    assert b'"delay_squarings":1000' in delayed.canonical() and delayed.run_id() != plain.run_id()
    assert RunSpec.from_canonical(delayed.canonical()) == delayed
    with pytest.raises(ValidationError):
        make_spec(verification={"delay_squarings": 2**40 + 1})
    with pytest.raises(ValidationError):
        make_spec(verification={"delay_squarings": -1})
    # Its fallback window, omitted at 0 (wait for the output however long it takes).
    window = make_spec(verification={"delay_squarings": 1000, "delay_blocks": 600})
    assert b'"delay_blocks":600' in window.canonical() and window.run_id() != delayed.run_id()
    assert RunSpec.from_canonical(window.canonical()) == window
    with pytest.raises(ValidationError):
        make_spec(verification={"delay_blocks": 10_000_001})

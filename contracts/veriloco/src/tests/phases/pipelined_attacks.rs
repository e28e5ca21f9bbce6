//! Adversarial cases of two epochs in flight (`docs/contract.md`, "Pipelined epochs"): a member
//! acting in the settling epoch and the training epoch at once — unbonding between them, lying or
//! staying silent in one of the two — keeps every slash of each epoch and every coin on the books.

use super::*;

/// Pipelined, with a `reveal` long enough that epoch 1 still reveals when epoch 0's verdict
/// rounds (each waited out to its deadline when it does not close early) are done.
fn pipelined_spec_with(economics: Value) -> String {
    spec_with(json!({"phases": {"pipelined": true, "reveal_blocks": 1000}, "economics": economics}))
}

fn member(net: &Net, address: &str) -> Value {
    net.chain.query(json!({"member": {"address": address}}))
}

/// Epoch 0 played to `verify`, then epoch 1 opened by the hosts' start vote and joined by
/// everyone: epoch 0 settles while epoch 1 trains. Returns a round-0 seat of epoch 0's
/// challenge (host 0, segment 0): a validator that owes a vote in the settling epoch.
fn open_epoch_1(net: &mut Net) -> String {
    net.play_to_verify();
    let seat = first_round(&net.challenge(&net.hosts[0], 0))[0].clone();
    net.propose_start_all(&digest("opt 1"));
    assert_eq!(net.chain.epoch()["settling"].as_u64(), Some(0));
    for who in net.everyone() {
        net.join(&who);
    }
    assert_eq!(net.phase(), "train");
    seat
}

/// Every host commits in epoch 1, which moves on to `reveal`.
fn commit_epoch_1(net: &mut Net) {
    for host in net.hosts.clone() {
        net.commit(&host);
    }
    assert_eq!(net.phase(), "reveal");
}

/// The settling epoch `epoch`'s verdict rounds played with `decide` (`focus` on it), up to its
/// `propose`: its report.
fn verdicts_of(net: &mut Net, epoch: u64, decide: Decide) -> Value {
    net.focus = Some(epoch);
    net.play_verdicts(decide);
    assert_eq!(net.phase(), "propose");
    net.chain.report(epoch)
}

/// Every validator votes `pass`, but `silent` does not vote at all.
fn all_pass_but_silent(silent: String) -> impl Fn(&str, &str, u64) -> Option<&'static str> {
    move |validator: &str, _: &str, _: u64| {
        if validator == silent {
            None
        } else {
            Some("pass")
        }
    }
}

/// Every validator votes `pass`, but `liar` votes `fail` on every seat.
fn all_pass_but_liar(liar: String) -> impl Fn(&str, &str, u64) -> Option<&'static str> {
    move |validator: &str, _: &str, _: u64| Some(if validator == liar { "fail" } else { "pass" })
}

#[test]
fn a_stake_unbonded_in_e_plus_1_while_e_settles_stays_slashable_by_both_epochs() {
    // A host joins epoch 1 while epoch 0 settles, unbonds everything (release: epoch 2), and
    // cheats in both epochs. Each epoch's slash reaches the unbonding entry (the second takes
    // its share of what the first left, not of the stake at join), and `claim` waits for
    // epoch 1 to settle even once epoch 2 is current.
    let mut net = Net::new(&pipelined_spec_with(json!({"unbonding_epochs": 1})), 3, 2);
    let h = net.hosts.clone();
    let cheater = h[2].clone();
    let cheats = |_: &str, host: &str, _: u64| Some(if host == h[2] { "fail" } else { "pass" });
    open_epoch_1(&mut net);
    let unbond = net.chain.ok(
        &cheater,
        json!({"unbond": {"amount": HOST_BOND.to_string()}}),
    );
    assert_eq!(top_attr(&unbond, "release_epoch"), Some("2"));
    commit_epoch_1(&mut net);
    net.chain.check_books();

    // Epoch 0 convicts the cheater: half of its stake, all of it unbonding.
    let report = verdicts_of(&mut net, 0, &cheats);
    assert_eq!(row(&report, "hosts", &cheater)["outcome"], "invalid");
    assert_eq!(
        amount(&row(&report, "hosts", &cheater)["slashed"]),
        HOST_BOND / 2
    );
    assert_eq!(
        member(&net, &cheater)["unbonding"],
        json!([{"amount": (HOST_BOND / 2).to_string(), "release_epoch": 2}])
    );
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    assert_eq!(net.phase(), "closed");
    net.focus = None;
    net.chain.check_books();

    // Epoch 1 reveals; its start vote opens epoch 2, the cheater's release epoch, with epoch 1
    // settling: the honest hosts' 20 M are more than 2/3 of the 25 M the committed hosts weigh
    // (the cheater weighs the 5 M it kept).
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "verify");
    net.propose_start_by(&[h[0].clone(), h[1].clone()], &digest("opt 2"));
    let e2 = net.chain.epoch();
    assert_eq!(
        (e2["epoch"].as_u64(), e2["settling"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        net.chain.refused(&cheater, json!({"claim": {}})),
        "claim: nothing to claim at epoch 1; the next release is at epoch 2"
    );

    // Epoch 1 convicts it again: half of what epoch 0 left.
    let report = verdicts_of(&mut net, 1, &cheats);
    let r = row(&report, "hosts", &cheater);
    assert_eq!(r["outcome"], "invalid");
    assert_eq!(amount(&r["stake"]), HOST_BOND, "its stake at join");
    assert_eq!(
        amount(&r["weight"]),
        HOST_BOND / 2,
        "its weight: what it kept"
    );
    assert_eq!(amount(&r["slashed"]), HOST_BOND / 4);
    net.propose(&h[0], &digest("settled 2"));
    net.propose(&h[1], &digest("settled 2"));
    assert_eq!(net.phase(), "closed");
    net.focus = None;
    assert_eq!(net.chain.epoch()["settling"], Value::Null);

    // Only now, and only what both slashes left.
    net.chain.ok(&cheater, json!({"claim": {}}));
    assert_eq!(net.chain.paid[&cheater], HOST_BOND / 4);
    assert_eq!(member(&net, &cheater)["unbonding"], json!([]));
    net.chain.check_books();
}

#[test]
fn a_validator_that_plays_only_the_training_epoch_is_silent_in_the_settling_one() {
    // Validator v2 replays epoch 1 but never votes on the settling epoch 0: it is `silent` in
    // epoch 0 (slashed, unpaid) and paid in epoch 1 only; each epoch pays its rewards once.
    let mut net = Net::new(&pipelined_spec_with(json!({})), 2, 4);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    // A second epoch's reward in the pool, so that each epoch pays a whole one.
    let funder = net.chain.addr("funder");
    net.chain.pay(&funder, json!({"fund_rewards": {}}), REWARD);
    // The lazy validator: a round-0 seat of epoch 0 (it owes a vote there).
    let lazy = open_epoch_1(&mut net);
    commit_epoch_1(&mut net);
    let report_0 = verdicts_of(&mut net, 0, &all_pass_but_silent(lazy.clone()));
    let r = row(&report_0, "validators", &lazy);
    assert_eq!(r["outcome"], "silent");
    assert_eq!(amount(&r["slashed"]), VALIDATOR_BOND / 5);
    assert_eq!(amount(&r["reward"]), 0);
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    assert_eq!(net.phase(), "closed");
    net.focus = None;

    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report_1 = net.chain.report(1);
    let r = row(&report_1, "validators", &lazy);
    assert_eq!(amount(&r["slashed"]), 0);
    assert_eq!(
        amount(&r["stake"]),
        VALIDATOR_BOND,
        "epoch 1 weighs its stake at join, before epoch 0's slash"
    );
    // Every reward paid is one epoch's: what the two reports pay is what left the pool, and a
    // member's lifetime total is the sum of its two rows.
    let paid = |report: &Value| -> u128 {
        ["hosts", "validators"]
            .iter()
            .flat_map(|role| report[*role].as_array().unwrap().iter())
            .map(|r| amount(&r["reward"]))
            .sum()
    };
    let (paid_0, paid_1) = (paid(&report_0), paid(&report_1));
    assert!(paid_0 > 0 && paid_1 > 0);
    assert_eq!(amount(&report_0["rewards_total"]), paid_0);
    assert_eq!(amount(&report_1["rewards_total"]), paid_1);
    let books = net.chain.query(json!({"accounting": {}}));
    assert_eq!(amount(&books["reward_pool"]), 2 * REWARD - paid_0 - paid_1);
    for who in h.iter().chain(v.iter()) {
        let rows: u128 = [&report_0, &report_1]
            .iter()
            .map(|rep| {
                let role = if h.contains(who) {
                    "hosts"
                } else {
                    "validators"
                };
                amount(&row(rep, role, who)["reward"])
            })
            .sum();
        assert_eq!(amount(&member(&net, who)["rewarded_total"]), rows, "{who}");
    }
    assert_eq!(
        amount(&row(&report_1, "validators", &lazy)["reward"]),
        amount(&member(&net, &lazy)["rewarded_total"])
    );
    net.chain.check_books();
}

#[test]
fn a_liar_slashed_in_e_weighs_what_it_kept_in_e_plus_1_and_cannot_join_e_plus_2() {
    // A validator joins epoch 1 while epoch 0 settles, then is convicted `wrong` in epoch 0 and
    // falls below the validators' minimum (4.5 M of its 5 M bond). Epoch 1 keeps it, but from
    // epoch 1's seed on it weighs what it still has at risk (4 M), not its stake at join (5 M),
    // in the picker draw and the final votes; epoch 2's join refuses it.
    let spec = pipelined_spec_with(json!({"min_validator_stake": "4500000"}));
    let mut net = Net::new(&spec, 2, 4);
    let h = net.hosts.clone();
    let liar = open_epoch_1(&mut net);
    commit_epoch_1(&mut net);
    let report = verdicts_of(&mut net, 0, &all_pass_but_liar(liar.clone()));
    let r = row(&report, "validators", &liar);
    assert_eq!(r["outcome"], "wrong");
    assert_eq!(amount(&r["slashed"]), VALIDATOR_BOND / 5);
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    net.focus = None;
    let bonded = VALIDATOR_BOND - VALIDATOR_BOND / 5;
    assert_eq!(amount(&member(&net, &liar)["bonded"]), bonded);
    assert_eq!(
        amount(&net.status_of(&liar)["stake"]),
        VALIDATOR_BOND,
        "its stake at join stays on record"
    );
    // Epoch 1 reveals and its start vote opens epoch 2: the liar is below the minimum.
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    let report_1 = net.chain.report(1);
    let row_1 = row(&report_1, "validators", &liar);
    assert_eq!(amount(&row_1["stake"]), VALIDATOR_BOND);
    assert_eq!(
        amount(&row_1["weight"]),
        bonded,
        "epoch 1 weighs what it has left"
    );
    // The final votes weigh it so too (V's weights), and so does the picker draw.
    let storage = &net.chain.deps.storage;
    let set = crate::records::load_validator_set(storage, 1).unwrap();
    let weights = crate::records::load_validator_stakes(storage, 1).unwrap();
    let at = set
        .iter()
        .position(|v| *v == liar)
        .expect("the liar revealed");
    assert_eq!(weights[at].0, bonded);
    assert!(weights
        .iter()
        .enumerate()
        .all(|(i, w)| i == at || w.0 == VALIDATOR_BOND));
    let joined = crate::records::JOINED_VALIDATORS
        .may_load(storage, 1)
        .unwrap()
        .unwrap();
    assert!(joined
        .iter()
        .all(|(a, w)| w.0 == if *a == liar { bonded } else { VALIDATOR_BOND }));
    let caps = crate::records::WEIGHT_CAPS
        .prefix(1)
        .page(storage, None, 8)
        .unwrap();
    assert_eq!(caps, vec![(liar.clone(), crate::types::Uint128(bonded))]);
    net.propose_start_all(&digest("opt 2"));
    assert_eq!(net.epoch_number(), 2);
    let commit = hex(&beacon::commitment(&liar, 2, &secret(&liar)));
    assert_eq!(
        net.chain.refused(
            &liar,
            json!({"join": {"epoch": 2, "beacon_commit": commit}})
        ),
        format!("join: bonded stake {bonded}inj is below the minimum 4500000inj for a validator")
    );
    net.chain.check_books();
}

#[test]
fn a_member_that_misses_both_epochs_pays_epoch_1_on_what_epoch_0_left() {
    // Nobody reveals in epoch 1 while epoch 0's verdict rounds are waited out: epoch 1's reveal
    // lapses, but its close (and so its `no_reveal` slashes) waits for epoch 0 to settle. The
    // validator also silent in epoch 0 pays epoch 0 first, then epoch 1 its share of what epoch
    // 0 left, and the books balance.
    let mut net = Net::new(&spec_with(json!({"phases": {"pipelined": true}})), 2, 4);
    let h = net.hosts.clone();
    let lazy = open_epoch_1(&mut net);
    commit_epoch_1(&mut net);
    let report_0 = verdicts_of(&mut net, 0, &all_pass_but_silent(lazy.clone()));
    net.chain.check_books();
    let r0 = row(&report_0, "validators", &lazy);
    assert_eq!(
        (r0["outcome"].as_str(), amount(&r0["slashed"])),
        (Some("silent"), VALIDATOR_BOND / 5)
    );
    let report_1 = net.chain.report(1);
    assert_eq!(
        row(&report_1, "validators", &lazy)["outcome"],
        "pending",
        "epoch 1's reveal close waits for epoch 0"
    );
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    net.focus = None;
    net.settle();
    let report_1 = net.chain.report(1);
    let r1 = row(&report_1, "validators", &lazy);
    let left = VALIDATOR_BOND - VALIDATOR_BOND / 5;
    assert_eq!(
        (r1["outcome"].as_str(), amount(&r1["slashed"])),
        (Some("no_reveal"), left / 2),
        "epoch 1's share of what epoch 0 left"
    );
    let m = member(&net, &lazy);
    assert_eq!(amount(&m["slashed_total"]), VALIDATOR_BOND / 5 + left / 2);
    assert_eq!(amount(&m["bonded"]), left - left / 2);
    net.chain.check_books();
}

#[test]
fn a_liar_convicted_in_e_after_everyone_revealed_in_e_plus_1_weighs_there_what_it_kept() {
    // The same liar, but everyone has revealed in epoch 1 before epoch 0 convicts it (a slow
    // settlement: its verdict rounds outlast epoch 1's reveal). Epoch 1's reveal close, which
    // fixes its weights, waits for epoch 0: the liar weighs in epoch 1's V and picker draw what
    // it kept, not its stake at join.
    let spec = pipelined_spec_with(json!({"min_validator_stake": "4500000"}));
    let mut net = Net::new(&spec, 2, 4);
    let h = net.hosts.clone();
    let liar = open_epoch_1(&mut net);
    commit_epoch_1(&mut net);
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "reveal", "complete, but held");
    let report = verdicts_of(&mut net, 0, &all_pass_but_liar(liar.clone()));
    assert_eq!(row(&report, "validators", &liar)["outcome"], "wrong");
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    net.focus = None;
    net.settle();
    assert_eq!(net.phase(), "verify");
    let bonded = VALIDATOR_BOND - VALIDATOR_BOND / 5;
    let report_1 = net.chain.report(1);
    let row_1 = row(&report_1, "validators", &liar);
    assert_eq!(amount(&row_1["stake"]), VALIDATOR_BOND);
    assert_eq!(amount(&row_1["weight"]), bonded);
    let storage = &net.chain.deps.storage;
    let set = crate::records::load_validator_set(storage, 1).unwrap();
    let weights = crate::records::load_validator_stakes(storage, 1).unwrap();
    let at = set.iter().position(|v| *v == liar).unwrap();
    assert_eq!(weights[at].0, bonded);
    let joined = crate::records::JOINED_VALIDATORS
        .may_load(storage, 1)
        .unwrap()
        .unwrap();
    assert!(joined
        .iter()
        .all(|(a, w)| w.0 == if *a == liar { bonded } else { VALIDATOR_BOND }));
    net.chain.check_books();
}

#[test]
fn a_host_convicted_in_e_after_joining_e_plus_1_votes_there_with_what_it_kept() {
    // Three hosts join and commit in epoch 1 while epoch 0 settles; epoch 0 then convicts host 0
    // (`invalid`: half its 10 M). In epoch 1 it weighs 5 M, not its stake at join: the honest
    // 20 M are more than 2/3 of the 25 M in both of epoch 1's host votes, the start vote that
    // opens epoch 2 and the model vote (at its stake at join neither would pass: 20 of 30 M).
    let mut net = Net::new(&pipelined_spec_with(json!({})), 3, 4);
    let h = net.hosts.clone();
    let cheater = h[0].clone();
    open_epoch_1(&mut net);
    commit_epoch_1(&mut net);
    let convict = |_: &str, host: &str, _: u64| Some(if host == h[0] { "fail" } else { "pass" });
    let report = verdicts_of(&mut net, 0, &convict);
    let r = row(&report, "hosts", &cheater);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("invalid"), HOST_BOND / 2)
    );
    let kept = HOST_BOND - HOST_BOND / 2;
    let storage = &net.chain.deps.storage;
    let cuts = crate::records::HOST_CUTS
        .may_load(storage, 1)
        .unwrap()
        .expect("cuts noted");
    assert_eq!(
        cuts.committed.0,
        HOST_BOND - kept,
        "epoch 1 counted its commitment at its stake at join"
    );
    net.propose(&h[1], &digest("settled 1"));
    net.propose(&h[2], &digest("settled 1"));
    net.focus = None;
    let storage = &net.chain.deps.storage;
    assert!(
        crate::records::HOST_CUTS
            .may_load(storage, 1)
            .unwrap()
            .is_none(),
        "taken off when epoch 0 closed"
    );
    let counts = crate::records::COUNTS
        .may_load(storage, 1)
        .unwrap()
        .unwrap();
    assert_eq!(counts.committed_stake.0, 2 * HOST_BOND + kept);
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    // The honest hosts' start vote opens epoch 2 without the cheater.
    net.propose_start_by(&[h[1].clone(), h[2].clone()], &digest("opt 2"));
    assert_eq!(net.epoch_number(), 2, "20 of 25 M is more than 2/3");
    let report_1 = verdicts_of(&mut net, 1, &|_, _, _| Some("pass"));
    let row_1 = row(&report_1, "hosts", &cheater);
    assert_eq!(row_1["outcome"], "accepted");
    assert_eq!(amount(&row_1["stake"]), HOST_BOND);
    assert_eq!(
        amount(&row_1["weight"]),
        kept,
        "epoch 1 weighs what it has left"
    );
    assert!(row(&report_1, "hosts", &h[1]).get("weight").is_none());
    // It proposes another model; the honest hosts' hash is agreed at once.
    net.propose(&cheater, &digest("forged 2"));
    net.propose(&h[1], &digest("settled 2"));
    let done = net.propose(&h[2], &digest("settled 2"));
    assert!(!done.events.is_empty());
    let report_1 = net.chain.report(1);
    assert_eq!(report_1["agreed"], true, "{}", report_1["agreed"]);
    assert_eq!(report_1["next_model_hash"], digest("settled 2"));
    net.chain.check_books();
}

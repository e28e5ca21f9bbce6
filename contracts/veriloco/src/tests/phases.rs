//! The phase machine on the native store: whole epochs driven through `contract::execute` and
//! read back through `contract::query`, as the chain would (one transaction per block, a refused
//! transaction reverted, funds moved in before the contract runs and bank sends paid after).
//! After every transaction the books must balance: the contract's balance equals bonded +
//! unbonding + reward pool.
//!
//! The game: verdicts committed then opened, disputes decided by committees, traps, the phase
//! windows counted from the block a phase actually opened, bounded join extensions.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::beacon;
use crate::commitments::{trap_commitment, verdict_commitment};
use crate::contract;
use crate::deps::{Deps, Order, Record, Storage};
use crate::epoch::tally::Tally;
use crate::error::ContractError;
use crate::hashing::{hex, tagged_hash};
use crate::limits::REPORT_PAGE;
use crate::msg::{parse_json, QueryMsg};
use crate::query::{walk_sittings, REPORT_VOTES_PER_UNIT};
use crate::records::{self, HEADERS};
use crate::sittings::COUNTED;
use crate::testing::MockDeps;
use crate::types::{BankMsg, CosmosMsg, Env, MessageInfo, Response};

const DENOM: &str = "inj";
const START: u64 = 100;
/// What each host and each validator of a [`Net`] bonds, and what is funded and paid as the
/// reward of an epoch: the spec's minimum stakes are `MIN_STAKE` (10^6), at least each role's
/// part of the reward.
const HOST_BOND: u128 = 10_000_000;
const VALIDATOR_BOND: u128 = 5_000_000;
const REWARD: u128 = 1_000_000;

/// The shared vector's real spec, with the smallest minimum stakes, short phases and `changes`
/// merged into its sections.
fn spec_with(changes: Value) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/spec.json");
    let vector: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut spec: Value = serde_json::from_str(vector["spec_json"].as_str().unwrap()).unwrap();
    let base = json!({
        "economics": {"min_host_stake": "1000000", "min_validator_stake": "1000000",
                      "reward_per_epoch": REWARD.to_string()},
        "phases": {"join_blocks": 50, "train_blocks": 50, "reveal_blocks": 50,
                   "verify_blocks": 50, "verdict_reveal_blocks": 50, "propose_blocks": 50,
                   "min_hosts": 1, "min_validators": 1},
        "train": {"inner_steps": 4, "segment_steps": 2},
        "verification": {"challenges_k": 1, "validators_r": 2},
    });
    for overrides in [base, changes] {
        for (section, fields) in overrides.as_object().unwrap() {
            for (field, value) in fields.as_object().unwrap() {
                spec[section][field] = value.clone();
            }
        }
    }
    serde_json::to_string(&spec).unwrap()
}

/// One contract on a one-transaction-per-block chain with a bank.
struct Chain {
    deps: MockDeps,
    height: u64,
    balance: u128,
    /// Bank sends out of the contract, by recipient.
    paid: BTreeMap<String, u128>,
    treasury: String,
}

fn attr<'a>(response: &'a Response, event: &str, key: &str) -> Option<&'a str> {
    response
        .events
        .iter()
        .filter(|e| e.ty == event)
        .flat_map(|e| e.attributes.iter())
        .find(|a| a.key == key)
        .map(|a| a.value.as_str())
}

/// An attribute of the response itself (what `add_attribute` set), not of one of its events.
fn top_attr<'a>(response: &'a Response, key: &str) -> Option<&'a str> {
    response
        .attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| a.value.as_str())
}

fn events<'a>(response: &'a Response, event: &str) -> Vec<BTreeMap<&'a str, &'a str>> {
    response
        .events
        .iter()
        .filter(|e| e.ty == event)
        .map(|e| {
            e.attributes
                .iter()
                .map(|a| (a.key.as_str(), a.value.as_str()))
                .collect()
        })
        .collect()
}

impl Chain {
    /// A contract whose paged closes process at most `settle_page` records per transaction
    /// (None: the default).
    fn with_page(spec_json: &str, settle_page: Option<u32>) -> Chain {
        let deps = MockDeps::default();
        let treasury = deps.api.addr("treasury");
        let mut chain = Chain {
            deps,
            height: START - 1,
            balance: 0,
            paid: BTreeMap::new(),
            treasury,
        };
        let mut msg = json!({"spec_json": spec_json, "initial_model_hash": hex(&[0u8; 32]),
                             "denom": DENOM, "treasury": chain.treasury});
        if let Some(page) = settle_page {
            msg["settle_page"] = json!(page);
        }
        chain.height += 1;
        let (env, info) = (chain.env(), chain.info("operator", 0));
        contract::instantiate(chain.deps.as_mut(), env, info, parse(msg)).unwrap();
        chain
    }

    fn addr(&self, label: &str) -> String {
        self.deps.api.addr(label)
    }

    fn env(&self) -> Env {
        serde_json::from_value(json!({
            "block": {"height": self.height, "time": (self.height * 1_000_000_000).to_string(),
                      "chain_id": "test-1"},
            "transaction": {"index": 0},
            "contract": {"address": self.addr("contract")},
        }))
        .unwrap()
    }

    fn info(&self, sender: &str, funds: u128) -> MessageInfo {
        let coins = if funds == 0 {
            json!([])
        } else {
            json!([{"denom": DENOM, "amount": funds.to_string()}])
        };
        serde_json::from_value(json!({"sender": sender, "funds": coins})).unwrap()
    }

    /// One transaction in a new block; a refusal reverts its writes, as the chain does.
    fn execute(
        &mut self,
        sender: &str,
        msg: Value,
        funds: u128,
    ) -> Result<Response, ContractError> {
        self.height += 1;
        let before = self.deps.storage.clone();
        let env = self.env();
        let info = self.info(sender, funds);
        let result = parse_json("execute message", msg.to_string().as_bytes())
            .and_then(|msg| contract::execute(self.deps.as_mut(), env, info, msg));
        match &result {
            Err(_) => self.deps.storage = before,
            Ok(response) => {
                self.balance += funds;
                for sub in response.messages.iter() {
                    let CosmosMsg::Bank(BankMsg::Send { to_address, amount }) = &sub.msg;
                    for coin in amount {
                        assert_eq!(coin.denom, DENOM);
                        self.balance -= coin.amount.0;
                        *self.paid.entry(to_address.clone()).or_default() += coin.amount.0;
                    }
                }
            }
        }
        self.check_books();
        if result.is_ok() {
            self.check_sittings();
            self.check_counts();
            self.check_vote_totals();
        }
        result
    }

    /// After every transaction, in every epoch, the totals the hosts' votes are measured against
    /// are what the hosts weigh now (`Participant::weight`: less than the stake at join once a
    /// slash of the epoch before reached it), less what is still to be taken off them
    /// (`records::HOST_CUTS`): the committed stake over the committed hosts, and, unless the
    /// exclusions stage withdrew some (it keeps the total), the accepted stake over the accepted.
    fn check_vote_totals(&self) {
        let storage = &self.deps.storage;
        for e in self.epoch_numbers() {
            let header = HEADERS.may_load(storage, e).unwrap().unwrap();
            let counts = records::COUNTS
                .may_load(storage, e)
                .unwrap()
                .unwrap_or_default();
            let cuts = records::HOST_CUTS
                .may_load(storage, e)
                .unwrap()
                .unwrap_or_default();
            let (mut committed, mut accepted) = (0u128, 0u128);
            let hosts = records::PARTICIPANTS
                .prefix(e)
                .page(storage, None, usize::MAX)
                .unwrap();
            for (address, p) in hosts
                .iter()
                .filter(|(_, p)| p.role == crate::state::Role::Host)
            {
                if records::COMMITMENTS.has(storage, (e, address.as_str())) {
                    committed += p.weight().0;
                }
                let pay = records::load_payout(storage, e, address).unwrap();
                if pay.outcome == records::Outcome::Accepted {
                    accepted += p.weight().0;
                }
            }
            assert_eq!(
                counts.committed_stake.0 - cuts.committed.0,
                committed,
                "epoch {e}: the committed hosts' weights"
            );
            if counts.withdrawn.unwrap_or(0) == 0 {
                assert_eq!(
                    header.accepted_stake.0, accepted,
                    "epoch {e}: the accepted hosts' weights"
                );
            }
        }
    }

    /// The number of every epoch the contract has a header for, in order.
    fn epoch_numbers(&self) -> Vec<u64> {
        HEADERS
            .range(&self.deps.storage, None, Order::Ascending)
            .map(|r| r.unwrap().0)
            .collect()
    }

    /// After every transaction, in every epoch, the `counts` of the answer (the epoch's
    /// counters) equal the lengths of its four lists (scans of its records), mid-close too.
    fn check_counts(&self) {
        for e in self.epoch_numbers() {
            let answer = self.query(json!({"epoch": {"epoch": e, "counts": true}}));
            assert!(answer["counts"].is_object(), "epoch {e}: counts absent");
            for key in ["hosts", "validators", "committed", "accepted"] {
                assert_eq!(
                    answer["counts"][key].as_u64().unwrap() as usize,
                    answer[key].as_array().unwrap().len(),
                    "epoch {e} phase {}: {key}",
                    answer["phase"]
                );
            }
        }
    }

    /// After every transaction, in every epoch whose sittings are counted, each validator's
    /// `participant` counts (its counters, `crate::sittings`) equal those of the walk of every
    /// host's assignments that the query made before (`query::walk_sittings`); while a phase's
    /// close runs, nothing is due (the walk may still count what the close has not reached).
    fn check_sittings(&self) {
        let storage = &self.deps.storage;
        let epochs: Vec<u64> = COUNTED
            .range(storage, None, Order::Ascending)
            .map(|r| r.unwrap().0 .0)
            .collect();
        for e in epochs {
            let header = HEADERS.may_load(storage, e).unwrap().unwrap();
            let set = records::load_validator_set(storage, e).unwrap();
            for (index, v) in set.iter().enumerate() {
                let walked = walk_sittings(storage, &header, e, v, index as u16).unwrap();
                let part = self.query(json!({"participant": {"address": v, "epoch": e}}));
                let counted: Vec<u32> = ["assigned", "voted", "to_commit", "to_reveal"]
                    .iter()
                    .map(|k| part[*k].as_u64().unwrap() as u32)
                    .collect();
                let phase = header.phase.as_str();
                let at = format!("epoch {e} phase {phase} validator {index}");
                assert_eq!(counted[..2], [walked.0, walked.1], "{at}: assigned, voted");
                if header.closing.is_some() {
                    assert_eq!(counted[2..], [0, 0], "{at}: closing, nothing due");
                } else {
                    assert_eq!(
                        counted[2..],
                        [walked.2, walked.3],
                        "{at}: to_commit, to_reveal"
                    );
                }
            }
        }
    }

    fn ok(&mut self, sender: &str, msg: Value) -> Response {
        self.pay(sender, msg, 0)
    }

    fn pay(&mut self, sender: &str, msg: Value, funds: u128) -> Response {
        let text = msg.to_string();
        self.execute(sender, msg, funds)
            .unwrap_or_else(|e| panic!("{text} from {sender} refused: {e}"))
    }

    fn refused(&mut self, sender: &str, msg: Value) -> String {
        match self.execute(sender, msg, 0) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    fn query(&self, msg: Value) -> Value {
        let msg = parse_json("query message", msg.to_string().as_bytes()).unwrap();
        let answer = contract::query(self.deps.as_ref(), self.env(), msg).unwrap();
        serde_json::from_slice(&answer.0).unwrap()
    }

    fn epoch(&self) -> Value {
        self.query(json!({"epoch": {}}))
    }

    /// The report of `epoch`, read in pages of the default size and assembled.
    fn report(&self, epoch: u64) -> Value {
        assemble(&self.report_pages(epoch, None))
    }

    /// Every page of the report of `epoch`, in pages of `limit` units (None: the default).
    fn report_pages(&self, epoch: u64, limit: Option<u32>) -> Vec<Value> {
        let mut pages: Vec<Value> = Vec::new();
        let (mut start_after, mut start_segment) = (Value::Null, Value::Null);
        loop {
            let page = self.query(json!({"report": {
                "epoch": epoch, "start_after": start_after, "start_segment": start_segment,
                "limit": limit}}));
            let next = page.get("next").cloned();
            start_segment = page.get("next_segment").cloned().unwrap_or(Value::Null);
            assert!(
                next.is_some() || start_segment.is_null(),
                "a segment without a host"
            );
            pages.push(page);
            match next {
                Some(n) => start_after = n,
                None => return pages,
            }
            assert!(pages.len() < 10_000, "the report does not end");
        }
    }

    fn status(&self, address: &str) -> Value {
        self.query(json!({"participant": {"address": address}}))
    }

    /// Send `advance` until no paged close is running; returns how many were sent.
    fn settle(&mut self, sender: &str) -> u32 {
        let mut sent = 0;
        while !self.epoch()["closing"].is_null() {
            // A close in progress reads as due: its deadline is the height it began.
            assert!(self.epoch()["phase_deadline"].as_u64().unwrap() <= self.height);
            self.ok(sender, json!({"advance": {}}));
            sent += 1;
            assert!(sent < 100_000, "the close does not end");
        }
        sent
    }

    /// The next transaction lands at `height`.
    fn wait_until(&mut self, height: u64) {
        assert!(height > self.height, "cannot go back to {height}");
        self.height = height - 1;
    }

    /// The next transaction lands at the current phase's deadline (and is the first one late).
    fn wait_past_deadline(&mut self) {
        let deadline = self.epoch()["phase_deadline"].as_u64().unwrap();
        self.wait_until(deadline);
    }

    /// Every coin the contract holds is accounted for.
    fn check_books(&self) {
        let books = self.query(json!({"accounting": {}}));
        let sum: u128 = ["bonded", "unbonding", "reward_pool"]
            .iter()
            .map(|k| books[*k].as_str().unwrap().parse::<u128>().unwrap())
            .sum();
        assert_eq!(
            sum, self.balance,
            "books {books} against balance {}",
            self.balance
        );
    }
}

/// The counts a report page gives per validator (`ValidatorCounts`), summed over the pages.
const COUNTS: [&str; 6] = [
    "assigned",
    "committed",
    "voted",
    "against",
    "unavailable",
    "unserved",
];

/// The whole report from its pages, as `Ledger.report` assembles it: the header every page
/// carries (the same on each), the hosts, validators and challenges in page order, and each
/// validator's counts summed over the pages.
fn assemble(pages: &[Value]) -> Value {
    let header = |page: &Value| -> Value {
        let mut h = page.clone();
        let h_obj = h.as_object_mut().unwrap();
        for key in [
            "hosts",
            "validators",
            "challenges",
            "counts",
            "next",
            "next_segment",
        ] {
            h_obj.remove(key);
        }
        h
    };
    let mut report = header(&pages[0]);
    let (mut hosts, mut validators, mut challenges) = (Vec::new(), Vec::new(), Vec::new());
    let mut sums: BTreeMap<String, [u64; 6]> = BTreeMap::new();
    for page in pages {
        assert_eq!(header(page), report, "every page carries the same header");
        hosts.extend(page["hosts"].as_array().unwrap().iter().cloned());
        validators.extend(page["validators"].as_array().unwrap().iter().cloned());
        challenges.extend(page["challenges"].as_array().unwrap().iter().cloned());
        for c in page["counts"].as_array().unwrap() {
            let sum = sums
                .entry(c["validator"].as_str().unwrap().to_string())
                .or_default();
            for (i, key) in COUNTS.iter().enumerate() {
                sum[i] += c[*key].as_u64().unwrap();
            }
        }
    }
    for v in validators.iter_mut() {
        let sum = sums
            .get(v["address"].as_str().unwrap())
            .copied()
            .unwrap_or_default();
        for (i, key) in COUNTS.iter().enumerate() {
            v[*key] = json!(sum[i]);
        }
    }
    let r = report.as_object_mut().unwrap();
    r.insert("hosts".into(), Value::Array(hosts));
    r.insert("validators".into(), Value::Array(validators));
    r.insert("challenges".into(), Value::Array(challenges));
    report
}

fn parse<T: serde::de::DeserializeOwned>(msg: Value) -> T {
    parse_json("message", msg.to_string().as_bytes()).unwrap()
}

fn secret(address: &str) -> [u8; 32] {
    tagged_hash("test-secret", &[address.as_bytes()])
}

fn digest(label: &str) -> String {
    hex(&tagged_hash("test", &[label.as_bytes()]))
}

/// Named members of one run, with their moves.
struct Net {
    chain: Chain,
    hosts: Vec<String>,
    validators: Vec<String>,
    /// The trap set each host commits to (none: the empty set).
    traps: BTreeMap<String, Vec<u32>>,
    /// The verdicts committed: (validator, host, segment) -> outcome.
    committed: BTreeMap<(String, String, u64), &'static str>,
    /// The epoch the moves go to (None: the current one); a pipelined run's settling epoch.
    focus: Option<u64>,
    /// The probe is on (`verification.probe_windows > 0`, the default): verdicts on a host's
    /// last segment carry a probe gain, [`HONEST_GAIN`] unless `gains` names the validator's.
    probe: bool,
    gains: BTreeMap<String, i64>,
    /// A gain dispute's deciding votes (final vote or re-vote, committed in `dispute` and opened
    /// in `dispute_reveal`) carry two gains: the main windows', [`HONEST_GAIN`] unless
    /// `revote_gains` names the validator's, and the dispute windows', [`HONEST_DISPUTE_GAIN`]
    /// unless `dispute_gains` names it (none for those in `no_dispute_gain`).
    revote_gains: BTreeMap<String, i64>,
    dispute_gains: BTreeMap<String, i64>,
    no_dispute_gain: BTreeSet<String>,
    /// Set while `reveal_round` opens a round-0 commitment (its gain is the main windows').
    opening_round0: bool,
}

/// The probe gain honest validators compute in these tests, in micro-nats.
const HONEST_GAIN: i64 = 41_250;
/// The gain honest validators compute on the dispute windows (another draw: another number).
const HONEST_DISPUTE_GAIN: i64 = 39_870;

fn outcome_code(outcome: &str) -> u8 {
    match outcome {
        "pass" => 0,
        "fail" => 1,
        _ => 2,
    }
}

fn verdict_salt(validator: &str, host: &str, segment: u64) -> [u8; 32] {
    let label = format!("{validator}|{host}|{segment}");
    tagged_hash("test-verdict-salt", &[label.as_bytes()])
}

fn trap_salt(host: &str) -> [u8; 32] {
    tagged_hash("test-trap-salt", &[host.as_bytes()])
}

/// Whether a spec's probe is on: `verification.probe_windows` > 0, 64 when absent.
fn probe_on(spec_json: &str) -> bool {
    let spec: Value = serde_json::from_str(spec_json).unwrap();
    spec["verification"]["probe_windows"].as_u64().unwrap_or(64) > 0
}

/// A validator's decision on (validator, host, segment): a verdict, or None to stay silent.
type Decide<'a> = &'a dyn Fn(&str, &str, u64) -> Option<&'static str>;

impl Net {
    /// `hosts` hosts staking `HOST_BOND` and `validators` validators staking `VALIDATOR_BOND`,
    /// bonded, and a reward pool of `REWARD`.
    fn new(spec_json: &str, hosts: usize, validators: usize) -> Net {
        Net::with_page(spec_json, hosts, validators, None)
    }

    fn with_page(
        spec_json: &str,
        hosts: usize,
        validators: usize,
        settle_page: Option<u32>,
    ) -> Net {
        let mut chain = Chain::with_page(spec_json, settle_page);
        let hosts: Vec<String> = (0..hosts)
            .map(|i| chain.addr(&format!("host-{i}")))
            .collect();
        let validators: Vec<String> = (0..validators)
            .map(|i| chain.addr(&format!("validator-{i}")))
            .collect();
        for (i, h) in hosts.iter().enumerate() {
            let bond =
                json!({"bond": {"role": "host", "endpoint": format!("http://host-{i}:8700")}});
            chain.pay(h, bond, HOST_BOND);
        }
        for v in validators.iter() {
            chain.pay(
                v,
                json!({"bond": {"role": "validator", "endpoint": "http://v"}}),
                VALIDATOR_BOND,
            );
        }
        let funder = chain.addr("funder");
        chain.pay(&funder, json!({"fund_rewards": {}}), REWARD);
        Net {
            chain,
            hosts,
            validators,
            traps: BTreeMap::new(),
            committed: BTreeMap::new(),
            focus: None,
            probe: probe_on(spec_json),
            gains: BTreeMap::new(),
            revote_gains: BTreeMap::new(),
            dispute_gains: BTreeMap::new(),
            no_dispute_gain: BTreeSet::new(),
            opening_round0: false,
        }
    }

    fn everyone(&self) -> Vec<String> {
        self.hosts
            .iter()
            .chain(self.validators.iter())
            .cloned()
            .collect()
    }

    fn epoch_number(&self) -> u64 {
        match self.focus {
            Some(e) => e,
            None => self.chain.epoch()["epoch"].as_u64().unwrap(),
        }
    }

    /// The epoch the moves go to, as `epoch {epoch}` answers.
    fn info(&self) -> Value {
        let e = self.epoch_number();
        self.chain.query(json!({"epoch": {"epoch": e}}))
    }

    /// `address`'s part in the epoch the moves go to.
    fn status_of(&self, address: &str) -> Value {
        let e = self.epoch_number();
        self.chain
            .query(json!({"participant": {"address": address, "epoch": e}}))
    }

    fn join(&mut self, who: &str) -> Response {
        let e = self.epoch_number();
        let commit = hex(&beacon::commitment(who, e, &secret(who)));
        self.chain
            .ok(who, json!({"join": {"epoch": e, "beacon_commit": commit}}))
    }

    fn trap_commit(&self, host: &str, e: u64) -> String {
        let traps = self.traps.get(host).cloned().unwrap_or_default();
        hex(&trap_commitment(host, e, &traps, &trap_salt(host)))
    }

    fn commit_msg(&self, host: &str, segments: u64) -> Value {
        let e = self.epoch_number();
        json!({"commit": {"epoch": e, "checkpoint_root": digest(&format!("root {host}")),
                          "delta_hash": digest(&format!("delta {host}")),
                          "loss_digest": digest("losses"), "segments": segments,
                          "train_loss_micro": 2_000_000,
                          "trap_commit": self.trap_commit(host, e)}})
    }

    fn commit(&mut self, host: &str) -> Response {
        let msg = self.commit_msg(host, 2);
        self.chain.ok(host, msg)
    }

    fn reveal(&mut self, who: &str) -> Response {
        let e = self.epoch_number();
        self.chain.ok(
            who,
            json!({"reveal": {"epoch": e, "secret": hex(&secret(who))}}),
        )
    }

    /// Every challenge `validator` sits on in the current epoch.
    fn challenges(&self, validator: &str) -> Vec<Value> {
        let e = self.epoch_number();
        let answer = self
            .chain
            .query(json!({"challenges": {"epoch": e, "validator": validator}}));
        answer["challenges"].as_array().unwrap().clone()
    }

    /// `validator`'s challenges still waiting for its commitment in the current phase:
    /// (host, segment).
    fn to_commit(&self, validator: &str) -> Vec<(String, u64)> {
        self.challenges(validator)
            .iter()
            .filter(|c| c["due"] == true && !c["committed"].as_bool().unwrap())
            .map(|c| {
                (
                    c["host"].as_str().unwrap().to_string(),
                    c["segment"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// `validator`'s `ready`: its round-0 seats whose committed verdict is not `pass`.
    fn ready(&mut self, validator: &str) -> Response {
        let e = self.epoch_number();
        let mut objections: Vec<(String, u64)> = self
            .challenges(validator)
            .iter()
            .filter(|c| c["round"] == 0 && c["committed"] == true)
            .map(|c| {
                (
                    c["host"].as_str().unwrap().to_string(),
                    c["segment"].as_u64().unwrap(),
                )
            })
            .filter(|(h, g)| {
                self.committed
                    .get(&(validator.to_string(), h.clone(), *g))
                    .map_or(false, |o| *o != "pass")
            })
            .collect();
        objections.sort();
        let list: Vec<Value> = objections
            .iter()
            .map(|(h, g)| json!({"host": h, "segment": g}))
            .collect();
        self.chain.ok(
            validator,
            json!({"ready": {"epoch": e, "objections": list}}),
        )
    }

    /// The probe gains `validator` posts with verdict `o` on (host, segment), if any: on the
    /// host's last segment (as `validator`'s challenges list it), probe on; (main windows,
    /// dispute windows), the second only on a vote deciding a gain dispute.
    fn gains_of(
        &self,
        validator: &str,
        host: &str,
        segment: u64,
        o: &str,
    ) -> (Option<i64>, Option<i64>) {
        if !self.probe || o == "unavailable" {
            return (None, None);
        }
        let mine = self.challenges(validator);
        let c = mine.iter().find(|c| c["host"] == host);
        let last = c.map_or(false, |c| c["segments"].as_u64() == Some(segment + 1));
        let phase = self.phase();
        let gain_dispute = mine
            .iter()
            .any(|c| c["host"] == host && c["segment"] == segment && c["gain_dispute"] == true);
        let dispute_windows = gain_dispute
            && (phase == "dispute" || (phase == "dispute_reveal" && !self.opening_round0));
        if !last {
            return (None, None);
        }
        if dispute_windows {
            let main = *self.revote_gains.get(validator).unwrap_or(&HONEST_GAIN);
            let dispute = (!self.no_dispute_gain.contains(validator)).then(|| {
                *self
                    .dispute_gains
                    .get(validator)
                    .unwrap_or(&HONEST_DISPUTE_GAIN)
            });
            (Some(main), dispute)
        } else {
            (
                Some(*self.gains.get(validator).unwrap_or(&HONEST_GAIN)),
                None,
            )
        }
    }

    fn verdict_commitment(&self, validator: &str, host: &str, segment: u64, o: &str) -> String {
        let evidence = tagged_hash("test", &[b"evidence"]);
        let (gain, dispute_gain) = self.gains_of(validator, host, segment, o);
        hex(&verdict_commitment(
            validator,
            self.epoch_number(),
            host,
            segment as u32,
            outcome_code(o),
            "0.5",
            &evidence,
            &verdict_salt(validator, host, segment),
            gain,
            dispute_gain,
        ))
    }

    fn commit_verdict(
        &mut self,
        validator: &str,
        host: &str,
        segment: u64,
        o: &'static str,
    ) -> Response {
        let e = self.epoch_number();
        let commitment = self.verdict_commitment(validator, host, segment, o);
        self.committed
            .insert((validator.to_string(), host.to_string(), segment), o);
        self.chain.ok(
            validator,
            json!({"commit_verdict": {"epoch": e, "host": host, "segment": segment,
                                      "commitment": commitment}}),
        )
    }

    fn opening(&self, validator: &str, host: &str, segment: u64, o: &str) -> Value {
        let mut msg = json!({"reveal_verdict": {"epoch": self.epoch_number(), "host": host,
                                  "segment": segment, "outcome": o, "distance": "0.5",
                                  "evidence": digest("evidence"),
                                  "salt": hex(&verdict_salt(validator, host, segment))}});
        // Without a gain the message is exactly the older format (no `gain_micro` key).
        let (gain, dispute_gain) = self.gains_of(validator, host, segment, o);
        if let Some(g) = gain {
            msg["reveal_verdict"]["gain_micro"] = json!(g);
        }
        if let Some(d) = dispute_gain {
            msg["reveal_verdict"]["dispute_gain_micro"] = json!(d);
        }
        msg
    }

    fn reveal_verdict(&mut self, validator: &str, host: &str, segment: u64) -> Response {
        let o = self.committed[&(validator.to_string(), host.to_string(), segment)];
        let msg = self.opening(validator, host, segment, o);
        self.chain.ok(validator, msg)
    }

    fn open_traps(&mut self, host: &str) -> Response {
        let e = self.epoch_number();
        let traps = self.traps.get(host).cloned().unwrap_or_default();
        self.chain.ok(
            host,
            json!({"reveal_traps": {"epoch": e, "segments": traps,
                                    "salt": hex(&trap_salt(host))}}),
        )
    }

    /// Commit every verdict `decide` gives for the current round; returns the last response.
    fn commit_round(&mut self, decide: Decide) -> Option<Response> {
        let mut last = None;
        for v in self.validators.clone() {
            for (host, segment) in self.to_commit(&v) {
                if let Some(o) = decide(&v, &host, segment) {
                    last = Some(self.commit_verdict(&v, &host, segment, o));
                }
            }
        }
        last
    }

    /// Open every verdict due now except those `withhold` names (in `verdict_reveal` only the
    /// `pass` ones: the others were objected to); returns the last response. (`open`: kept for
    /// the callers; traps open in `objection`.)
    fn reveal_round(
        &mut self,
        withhold: &dyn Fn(&str, &str, u64) -> bool,
        _open: &[String],
    ) -> Option<Response> {
        let mut last = None;
        let first = self.phase() == "verdict_reveal";
        for v in self.validators.clone() {
            for c in self.challenges(&v) {
                let (host, segment) = (
                    c["host"].as_str().unwrap().to_string(),
                    c["segment"].as_u64().unwrap(),
                );
                let kept = self
                    .committed
                    .get(&(v.clone(), host.clone(), segment))
                    .copied()
                    .unwrap_or("pass");
                if c["due"] == true
                    && c["committed"].as_bool().unwrap()
                    && !c["revealed"].as_bool().unwrap()
                    && !withhold(&v, &host, segment)
                    && !(first && kept != "pass")
                {
                    self.opening_round0 = c["round"] == 0;
                    last = Some(self.reveal_verdict(&v, &host, segment));
                    self.opening_round0 = false;
                }
            }
        }
        last
    }

    /// `objection`: every seated validator sends its `ready`, the hosts in `open` open their
    /// trap sets.
    fn objection_round(&mut self, open: &[String]) -> Option<Response> {
        let mut last = None;
        for v in self.validators.clone() {
            if self.phase() != "objection" {
                return last;
            }
            if self.status_of(&v)["ready_due"] == true {
                last = Some(self.ready(&v));
            }
        }
        for h in open.iter() {
            if self.phase() != "objection" {
                return last;
            }
            let status = self.status_of(h);
            if status["challenged"] == true && status["traps_opened"] == false {
                last = Some(self.open_traps(h));
            }
        }
        last
    }

    /// Play the current verdict phase to its close: commit what `decide` gives (verify,
    /// dispute), send the `ready`s and open the traps of the hosts in `open` (objection), or open
    /// what is due (verdict_reveal, dispute_reveal); wait out a phase that does not close early.
    fn play_round(&mut self, decide: Decide, open: &[String]) {
        let phase = self.phase();
        match phase.as_str() {
            "verify" | "dispute" => {
                self.commit_round(decide);
            }
            "objection" => {
                self.objection_round(open);
            }
            _ => {
                self.reveal_round(&|_, _, _| false, open);
            }
        }
        self.settle();
        if self.phase() == phase {
            let deadline = self.info()["phase_deadline"].as_u64().unwrap();
            self.chain.wait_until(deadline);
            self.chain
                .ok(&self.hosts[0].clone(), json!({"advance": {}}));
            self.settle();
        }
    }

    /// Play every verdict phase until the epoch leaves them.
    fn play_verdicts(&mut self, decide: Decide) {
        let hosts = self.hosts.clone();
        for _ in 0..8 {
            if !matches!(
                self.phase().as_str(),
                "verify" | "objection" | "verdict_reveal" | "dispute" | "dispute_reveal"
            ) {
                return;
            }
            self.play_round(decide, &hosts);
        }
        panic!("the verdict rounds did not end");
    }

    fn propose(&mut self, host: &str, model: &str) -> Response {
        let e = self.epoch_number();
        let msg = json!({"propose_model": {"epoch": e, "model_hash": model,
                                           "val_loss_micro": 1_900_000}});
        self.chain.ok(host, msg)
    }

    /// Join, commit and reveal with everyone, up to `verify`.
    fn play_to_verify(&mut self) {
        for who in self.everyone() {
            self.join(&who);
        }
        for h in self.hosts.clone() {
            self.commit(&h);
        }
        for who in self.everyone() {
            self.reveal(&who);
        }
        self.settle();
        assert_eq!(self.chain.epoch()["phase"], "verify");
    }

    /// Drive a paged close in progress to its end (`advance` from the first host).
    fn settle(&mut self) -> u32 {
        let sender = self.hosts[0].clone();
        if self.focus.is_none() {
            return self.chain.settle(&sender);
        }
        let mut sent = 0;
        while !self.info()["closing"].is_null() {
            self.chain.ok(&sender, json!({"advance": {}}));
            sent += 1;
            assert!(sent < 100_000, "the close does not end");
        }
        sent
    }

    fn phase(&self) -> String {
        self.info()["phase"].as_str().unwrap().to_string()
    }

    /// The report's challenge (host, segment) of the current epoch.
    fn challenge(&self, host: &str, segment: u64) -> Value {
        self.challenge_of(self.epoch_number(), host, segment)
    }

    /// The report's challenge (host, segment) of `epoch`.
    fn challenge_of(&self, epoch: u64, host: &str, segment: u64) -> Value {
        let report = self.chain.report(epoch);
        report["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["host"] == host && c["segment"].as_u64() == Some(segment))
            .unwrap()
            .clone()
    }
}

fn amount(v: &Value) -> u128 {
    v.as_str().unwrap().parse().unwrap()
}

fn row<'a>(report: &'a Value, role: &str, address: &str) -> &'a Value {
    report[role]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == address)
        .unwrap_or_else(|| panic!("{address} not in the report's {role}"))
}

fn first_round(challenge: &Value) -> Vec<String> {
    challenge["votes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["round"] == 0)
        .map(|v| v["validator"].as_str().unwrap().to_string())
        .collect()
}

fn honest(_: &str, _: &str, _: u64) -> Option<&'static str> {
    Some("pass")
}

#[test]
fn every_phase_closes_early_when_everyone_acted() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    assert_eq!(net.phase(), "join");
    for who in net.everyone().iter().take(4) {
        net.join(who);
    }
    assert_eq!(
        net.phase(),
        "join",
        "one eligible member has not joined yet"
    );
    let last = net.join(&v[1]);
    assert_eq!(attr(&last, "phase", "phase"), Some("train"));
    let at = net.chain.height;
    let info = net.chain.epoch();
    assert_eq!(info["phase"], "train");
    assert_eq!(
        info["phase_deadline"].as_u64(),
        Some(at + 50),
        "counts from the closing message"
    );
    for host in h.iter() {
        net.commit(host);
    }
    assert_eq!(net.phase(), "reveal");
    let mut closing = None;
    for who in net.everyone() {
        closing = Some(net.reveal(&who));
    }
    assert_eq!(net.phase(), "verify");
    let seed = events(closing.as_ref().unwrap(), "seed");
    assert_eq!(seed.len(), 1, "the last reveal closes the phase");
    // Two equal stakes: one picker holds more than a third, so each host has one picker; with
    // k = 1 and S = 2 it picks segment 0, and the last segment is always checked: 2 seats a host.
    assert_eq!(seed[0]["verdicts_expected"], "6");
    let seats: Vec<usize> = v.iter().map(|x| net.to_commit(x).len()).collect();
    assert_eq!(seats.iter().sum::<usize>(), 6);
    // The last commitment closes `verify`; nothing about any verdict is visible before.
    let committed = net.commit_round(&honest).unwrap();
    assert_eq!(attr(&committed, "phase", "phase"), Some("objection"));
    let report = net.chain.report(0);
    for c in report["challenges"].as_array().unwrap() {
        assert_eq!(c["outcome"], "pending");
        for vote in c["votes"].as_array().unwrap() {
            assert!(vote["commitment"].is_string() && vote["outcome"].is_null());
        }
    }
    // Every seated validator sends `ready` (no objection); the phase still waits for the hosts'
    // trap openings, the last of which closes it.
    for x in v.iter() {
        if net.chain.status(x)["ready_due"] == true {
            net.ready(x);
        }
    }
    assert_eq!(net.phase(), "objection");
    net.open_traps(&h[0]);
    net.open_traps(&h[1]);
    let opened = net.open_traps(&h[2]);
    assert_eq!(attr(&opened, "phase", "phase"), Some("verdict_reveal"));
    // The last `pass` opening closes verdict_reveal: every undisputed challenge passes.
    let finalized = net.reveal_round(&|_, _, _| false, &[]).unwrap();
    let dispute = &events(&finalized, "dispute")[0];
    assert_eq!((dispute["decided"], dispute["disputes"]), ("6", "0"));
    assert_eq!(attr(&finalized, "finalize", "accepted"), Some("3"));
    assert_eq!(net.phase(), "propose");
    // 80 % of the 1,000,000 paid to 3 accepted hosts, 20 % to the diligent validators.
    let report = net.chain.report(0);
    for host in h.iter() {
        assert_eq!(row(&report, "hosts", host)["outcome"], "accepted");
        assert_eq!(row(&report, "hosts", host)["traps"], json!([]));
        assert_eq!(amount(&row(&report, "hosts", host)["reward"]), 266_666);
        assert_eq!(net.chain.paid[host], 266_666);
    }
    let diligent = seats.iter().filter(|n| **n > 0).count() as u128;
    let per_validator = 200_000 / diligent;
    for (validator, n) in v.iter().zip(seats.iter()) {
        let r = row(&report, "validators", validator);
        let expected = if *n > 0 { "diligent" } else { "idle" };
        assert_eq!(
            (
                r["outcome"].as_str(),
                r["assigned"].as_u64(),
                r["voted"].as_u64()
            ),
            (Some(expected), Some(*n as u64), Some(*n as u64))
        );
        if *n > 0 {
            assert_eq!(net.chain.paid[validator], per_validator);
        }
    }
    // The unpaid remainder stays in the pool.
    let books = net.chain.query(json!({"accounting": {}}));
    assert_eq!(
        amount(&books["reward_pool"]),
        REWARD - 3 * 266_666 - diligent * per_validator
    );

    // Two of three equal stakes is not more than 2/3; the third proposal agrees.
    let theta = digest("theta 1");
    net.propose(&h[0], &theta);
    net.propose(&h[1], &theta);
    assert_eq!(net.phase(), "propose");
    let closing = net.propose(&h[2], &theta);
    assert_eq!(attr(&closing, "epoch", "agreed"), Some("true"));
    let closed = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(closed["phase"], "closed");
    assert_eq!(closed["next_model_hash"], theta.as_str());
    let next = net.chain.epoch();
    assert_eq!(next["epoch"], 1);
    assert_eq!(next["phase"], "join");
    assert_eq!(next["model_hash"], theta.as_str());
    assert_eq!(next["prev_seed"], closed["seed"]);
    assert_eq!(next["started_at"].as_u64(), Some(net.chain.height));
}

#[test]
fn a_phase_gets_its_whole_window_from_the_block_it_actually_opened() {
    let phases = json!({"phases": {"join_blocks": 10, "train_blocks": 10, "reveal_blocks": 10,
                                   "verify_blocks": 10, "verdict_reveal_blocks": 10,
                                   "propose_blocks": 10}});
    let mut net = Net::new(&spec_with(phases), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    let train_start = net.chain.height;
    net.commit(&h[0]);
    // The chain idles far past the train deadline. The first transaction closes train *now*
    // and opens reveal with its whole window; it does not also close reveal (whose old deadline
    // has long passed), so nobody is recorded as not revealing without having had the chance.
    net.chain.wait_until(train_start + 100);
    let response = net.chain.ok(&v[0], json!({"advance": {}}));
    let at = net.chain.height;
    let transitions = response
        .attributes
        .iter()
        .find(|a| a.key == "transitions")
        .unwrap();
    assert_eq!(transitions.value, "1");
    let phase = &events(&response, "phase")[0];
    assert_eq!(
        (phase["phase"], phase["at"]),
        ("reveal", at.to_string().as_str())
    );
    assert_eq!(net.chain.epoch()["phase_deadline"].as_u64(), Some(at + 10));
    let err = net.chain.refused(&v[0], json!({"advance": {}}));
    assert!(err.starts_with("advance: nothing is due"), "{err}");
    // Everyone reveals in the window: h1 did not commit (absent, its first miss: excused),
    // nobody is no_reveal.
    for who in net.everyone() {
        net.reveal(&who);
    }
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &h[1])["outcome"], "absent_excused");
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "pending");
    assert_eq!(row(&report, "validators", &v[0])["outcome"], "pending");
    assert_eq!(net.phase(), "verify");
}

#[test]
fn a_short_join_is_extended_a_bounded_number_of_times_then_the_epoch_is_abandoned() {
    let phases = json!({"phases": {"min_hosts": 2, "join_blocks": 10, "max_join_extensions": 2},
                        "economics": {"unbonding_epochs": 1}});
    let mut net = Net::new(&spec_with(phases), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.join(&h[0]);
    net.join(&v[0]);
    net.chain
        .ok(&h[1], json!({"unbond": {"amount": HOST_BOND.to_string()}}));
    let err = net.chain.refused(&v[0], json!({"advance": {}}));
    assert!(
        err.starts_with("advance: nothing is due: epoch 0 is in phase join"),
        "{err}"
    );
    for extension in 1..=2 {
        net.chain.wait_past_deadline();
        let response = net.chain.ok(&v[0], json!({"advance": {}}));
        let phase = &events(&response, "phase")[0];
        assert_eq!(phase["extended"], "true");
        assert_eq!(phase["extensions"], extension.to_string().as_str());
        // A new window from the extension's block.
        assert_eq!(
            net.chain.epoch()["phase_deadline"].as_u64(),
            Some(net.chain.height + 10)
        );
    }
    net.chain.wait_past_deadline();
    let response = net.chain.ok(&v[0], json!({"advance": {}}));
    assert_eq!(attr(&response, "epoch", "abandoned"), Some("true"));
    let closed = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(
        (closed["phase"].as_str(), closed["abandoned"].as_bool()),
        (Some("closed"), Some(true))
    );
    assert_eq!(closed["agreed"], false);
    assert_eq!(closed["next_model_hash"], closed["model_hash"]);
    assert!(closed["seed"].is_string());
    let next = net.chain.epoch();
    assert_eq!(
        (next["epoch"].as_u64(), next["phase"].as_str()),
        (Some(1), Some("join"))
    );
    assert_eq!(next["prev_seed"], closed["seed"]);
    // Nobody was slashed or paid; epochs went on, so h1's unbonding matured and can be claimed.
    let report = net.chain.report(0);
    assert_eq!(report["slashed_total"], "0");
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "pending");
    net.chain.ok(&h[1], json!({"claim": {}}));
    assert_eq!(net.chain.paid[&h[1]], HOST_BOND);
}

#[test]
fn a_standby_reveals_for_the_one_member_that_named_it_and_does_nothing_else() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let standby = net.chain.addr("standby");
    // Naming one: only by a member, never itself or a member, and a valid address.
    assert!(net
        .chain
        .refused(&standby, json!({"set_standby": {"standby": h[0]}}))
        .contains("is not a member"));
    assert!(net
        .chain
        .refused(&h[1], json!({"set_standby": {"standby": h[1]}}))
        .contains("cannot be its own standby"));
    assert!(net
        .chain
        .refused(&h[1], json!({"set_standby": {"standby": v[0]}}))
        .contains("is a member"));
    assert!(net
        .chain
        .refused(&h[1], json!({"set_standby": {"standby": "not an address"}}))
        .contains("set_standby: standby"));
    let r = net
        .chain
        .ok(&h[1], json!({"set_standby": {"standby": standby}}));
    assert_eq!(top_attr(&r, "standby"), Some(standby.as_str()));
    for who in net.everyone() {
        net.join(&who);
    }
    // The standby can do nothing but reveal: no join, commit or stake of the member's.
    for msg in [
        json!({"commit": {"epoch": 0, "checkpoint_root": hex(&[1; 32]), "delta_hash": hex(&[2; 32]),
                          "loss_digest": hex(&[3; 32]), "segments": 2, "train_loss_micro": 1,
                          "trap_commit": hex(&[4; 32])}}),
        json!({"unbond": {"amount": "1"}}),
        json!({"claim": {}}),
        json!({"set_standby": {"standby": null}}),
    ] {
        net.chain.refused(&standby, msg);
    }
    net.commit(&h[0]);
    net.commit(&h[1]); // h[1]'s machine then dies
    assert_eq!(net.phase(), "reveal");
    let reveal_for = |who: &str| json!({"reveal": {"epoch": 0, "secret": hex(&secret(who)), "participant": who}});
    // Not for another member (its own secret or not), and not as a member that named nobody.
    assert!(net
        .chain
        .refused(&standby, reveal_for(&h[0]))
        .contains("is not the standby of"));
    assert!(net
        .chain
        .refused(&v[0], reveal_for(&h[1]))
        .contains("is not the standby of"));
    // The wrong secret for its member is refused like the member's own.
    let wrong = json!({"reveal": {"epoch": 0, "secret": hex(&secret(&h[0])), "participant": h[1]}});
    assert!(net
        .chain
        .refused(&standby, wrong)
        .contains("does not match the beacon commitment"));
    net.reveal(&h[0]);
    net.reveal(&v[0]);
    let r = net.chain.ok(&standby, reveal_for(&h[1]));
    assert_eq!(top_attr(&r, "standby"), Some(standby.as_str()));
    assert_eq!(top_attr(&r, "member"), Some(h[1].as_str()));
    assert_eq!(net.phase(), "verify"); // every reveal in: reveal closed early
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &h[1])["outcome"], "pending");
    assert_eq!(row(&report, "hosts", &h[1])["revealed"], true);
}

#[test]
fn the_standby_query_shows_whom_each_member_named() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let standby = net.chain.addr("standby");
    let other = net.chain.addr("other standby");
    let named = |net: &Net, member: &str| net.chain.query(json!({"standby": {"member": member}}));
    assert_eq!(named(&net, &h[0]), json!({"member": h[0], "standby": null}));
    net.chain
        .ok(&h[0], json!({"set_standby": {"standby": standby}}));
    net.chain
        .ok(&v[0], json!({"set_standby": {"standby": other}}));
    assert_eq!(
        named(&net, &h[0]),
        json!({"member": h[0], "standby": standby})
    );
    assert_eq!(named(&net, &v[0])["standby"], json!(other));
    // h[1] named nobody.
    assert_eq!(named(&net, &h[1])["standby"], Value::Null);
    // The latest set_standby wins; a refused one changes nothing; a cleared one shows null.
    net.chain
        .ok(&h[0], json!({"set_standby": {"standby": other}}));
    assert_eq!(named(&net, &h[0])["standby"], json!(other));
    net.chain
        .refused(&h[0], json!({"set_standby": {"standby": h[1]}}));
    assert_eq!(named(&net, &h[0])["standby"], json!(other));
    net.chain
        .ok(&h[0], json!({"set_standby": {"standby": null}}));
    assert_eq!(named(&net, &h[0])["standby"], Value::Null);
    // Whom nobody bonded as: none; the standby itself names nobody.
    assert_eq!(named(&net, &standby)["standby"], Value::Null);
    // An address that is not one is refused, naming the query.
    for bad in ["inj1bad", "", "not an address"] {
        let msg = parse(json!({"standby": {"member": bad}}));
        let err = contract::query(net.chain.deps.as_ref(), net.chain.env(), msg).unwrap_err();
        assert!(err.to_string().starts_with("standby: "), "{err}");
    }
    // Unknown fields are refused like every query's.
    let msg = json!({"standby": {"member": h[0], "epoch": 0}}).to_string();
    assert!(parse_json::<QueryMsg>("query message", msg.as_bytes()).is_err());
}

/// The records `msg` reads, and its answer's JSON bytes.
fn counted_query_bytes(chain: &Chain, msg: Value) -> (usize, Vec<u8>) {
    let counting = CountingStorage {
        inner: &chain.deps.storage,
        reads: Cell::new(0),
    };
    let deps = Deps {
        storage: &counting,
        api: &chain.deps.api,
    };
    let msg = parse_json("query message", msg.to_string().as_bytes()).unwrap();
    let answer = contract::query(deps, chain.env(), msg).unwrap();
    (counting.reads.get(), answer.0)
}

/// The records `msg` reads, and its answer.
fn counted_query(chain: &Chain, msg: Value) -> (usize, Value) {
    let (reads, answer) = counted_query_bytes(chain, msg);
    (reads, serde_json::from_slice(&answer).unwrap())
}

#[test]
fn a_header_only_epoch_query_omits_the_lists_and_reads_the_same_at_any_size() {
    const LISTS: [&str; 4] = ["hosts", "validators", "committed", "accepted"];
    let mut reads = Vec::new();
    for (hosts, validators) in [(2, 1), (8, 3)] {
        let mut net = Net::new(&spec_with(json!({})), hosts, validators);
        net.play_to_verify();
        let chain = &net.chain;
        let full = chain.epoch();
        assert_eq!(full["hosts"].as_array().unwrap().len(), hosts);
        assert_eq!(full["validators"].as_array().unwrap().len(), validators);
        assert_eq!(full["committed"].as_array().unwrap().len(), hosts);
        // `lists: true` is the answer without the field; `lists: false` the same but the lists.
        assert_eq!(chain.query(json!({"epoch": {"lists": true}})), full);
        let (header_reads, header) = counted_query(chain, json!({"epoch": {"lists": false}}));
        let (full_reads, _) = counted_query(chain, json!({"epoch": {}}));
        let mut expected = full.clone();
        for key in LISTS {
            expected.as_object_mut().unwrap().remove(key);
        }
        assert_eq!(header, expected);
        assert_eq!(header["phase"], "verify");
        assert!(
            full_reads > header_reads + hosts + validators,
            "{full_reads} {header_reads}"
        );
        // Named epochs and the `epochs` page likewise.
        let named = chain.query(json!({"epoch": {"epoch": 0, "lists": false}}));
        assert_eq!(named, expected);
        let page = chain.query(json!({"epochs": {"lists": false}}));
        assert_eq!(page, json!({ "epochs": [expected] }));
        let page = chain.query(json!({"epochs": {}}));
        assert_eq!(page["epochs"][0]["hosts"], full["hosts"]);
        let (page_reads, _) = counted_query(chain, json!({"epochs": {"lists": false}}));
        // `counts: true` (0.3.4) adds the lists' lengths for one more read, lists or not.
        let (counted_reads, counted) =
            counted_query(chain, json!({"epoch": {"lists": false, "counts": true}}));
        let want =
            json!({"hosts": hosts, "validators": validators, "committed": hosts, "accepted": 0});
        let mut with_counts = expected.clone();
        with_counts["counts"] = want.clone();
        assert_eq!(counted, with_counts);
        assert_eq!(counted_reads, header_reads + 1);
        assert_eq!(
            chain.query(json!({"epoch": {"counts": true}}))["counts"],
            want
        );
        assert_eq!(chain.query(json!({"epoch": {"counts": false}})), full);
        let page = chain.query(json!({"epochs": {"lists": false, "counts": true}}));
        assert_eq!(page, json!({ "epochs": [with_counts] }));
        reads.push((header_reads, page_reads));
    }
    // The header form reads the same records whatever the number of participants.
    assert_eq!(reads[0], reads[1]);
    // A `lists` that is not a bool is refused, as is an unknown field.
    for msg in [
        json!({"epoch": {"lists": "no"}}),
        json!({"epochs": {"lists": 0}}),
        json!({"epochs": {"list": false}}),
        json!({"epoch": {"counts": "yes"}}),
        json!({"epochs": {"counts": 1}}),
    ] {
        let text = msg.to_string();
        assert!(parse_json::<QueryMsg>("query message", text.as_bytes()).is_err());
    }
}

#[test]
fn a_standby_reveal_after_the_members_own_is_refused() {
    let mut net = Net::new(&spec_with(json!({})), 1, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let standby = net.chain.addr("standby");
    net.chain
        .ok(&h[0], json!({"set_standby": {"standby": standby}}));
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    net.reveal(&h[0]);
    let msg = json!({"reveal": {"epoch": 0, "secret": hex(&secret(&h[0])), "participant": h[0]}});
    assert!(net
        .chain
        .refused(&standby, msg)
        .contains("already revealed"));
    // Cleared, the standby may no longer reveal for it.
    net.chain
        .ok(&h[0], json!({"set_standby": {"standby": null}}));
    let msg = json!({"reveal": {"epoch": 0, "secret": hex(&secret(&v[0])), "participant": v[0]}});
    assert!(net
        .chain
        .refused(&standby, msg)
        .contains("is not the standby of"));
}

#[test]
fn reveal_close_marks_absent_and_non_revealing_participants_and_challenges_the_rest() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    net.commit(&h[1]);
    net.chain.wait_past_deadline();
    net.chain.ok(&v[0], json!({"advance": {}}));
    assert_eq!(net.phase(), "reveal");
    net.reveal(&h[0]); // committed and revealed: challenged
    net.reveal(&h[2]); // revealed without a commitment: absent (its first miss: excused)
    net.reveal(&v[0]); // h[1] and v[1] never reveal
    net.chain.wait_past_deadline();
    let response = net.chain.ok(&v[0], json!({"advance": {}}));
    let seed = attr(&response, "seed", "seed").unwrap().to_string();
    let config = net.chain.query(json!({"config": {}}));
    let run_id: [u8; 32] = {
        let mut out = [0u8; 32];
        let text = config["run_id"].as_str().unwrap();
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    };
    let mut reveals: Vec<(String, [u8; 32])> = [&h[0], &h[2], &v[0]]
        .iter()
        .map(|a| (a.to_string(), secret(a)))
        .collect();
    reveals.sort();
    assert_eq!(seed, hex(&beacon::epoch_seed(&run_id, 0, &reveals)));
    assert_eq!(attr(&response, "seed", "challenged_hosts"), Some("1"));
    // V = {v0}: each of h0's two challenges has one validator.
    assert_eq!(attr(&response, "seed", "verdicts_expected"), Some("2"));
    assert!(net.to_commit(&v[1]).is_empty());
    let report = net.chain.report(0);
    let outcome = |role: &str, a: &str| {
        row(&report, role, a)["outcome"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(outcome("hosts", &h[0]), "pending");
    assert_eq!(outcome("hosts", &h[1]), "no_reveal");
    assert_eq!(outcome("hosts", &h[2]), "absent_excused");
    assert_eq!(outcome("validators", &v[1]), "no_reveal");
    // One validator's unanimous pass decides (there is nobody to dispute it).
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "accepted");
    // Not revealing costs the no-reveal slash (at least the invalid one: 50 %); a host that
    // revealed but did not commit, for the first time in the window, pays nothing.
    assert_eq!(amount(&row(&report, "hosts", &h[1])["slashed"]), 5_000_000);
    assert_eq!(amount(&row(&report, "hosts", &h[2])["slashed"]), 0);
    assert_eq!(
        amount(&row(&report, "validators", &v[1])["slashed"]),
        2_500_000
    );
    assert_eq!(net.chain.paid[&net.chain.treasury], 7_500_000);
    // The only accepted host takes the whole host share; the only diligent validator the rest.
    assert_eq!(net.chain.paid[&h[0]], 800_000);
    assert_eq!(net.chain.paid[&v[0]], 200_000);
}

#[test]
fn a_lone_fail_goes_to_a_committee_and_the_liar_pays() {
    let mut net = Net::new(&spec_with(json!({})), 2, 4);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.play_to_verify();
    // The liar: the first validator of h0's segment 0 (a griefer that always says fail).
    let liar = first_round(&net.challenge(&h[0], 0))[0].clone();
    let liar_decide = liar.clone();
    let decide = move |validator: &str, _: &str, _: u64| {
        Some(if validator == liar_decide {
            "fail"
        } else {
            "pass"
        })
    };
    net.play_round(&decide, &h);
    assert_eq!(net.phase(), "objection", "a lone fail never decides");
    while net.phase() != "dispute" {
        net.play_round(&decide, &h);
    }
    let c = net.challenge(&h[0], 0);
    assert_eq!(
        c["rounds"], 1,
        "the liar objected: the challenge is disputed"
    );
    assert_eq!(net.chain.epoch()["round"], 1);
    // The final round: every member of V without a round-0 seat on it, never the host.
    let c = net.challenge(&h[0], 0);
    let finals: Vec<String> = c["votes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["round"] == 1)
        .map(|x| x["validator"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(finals.len() + first_round(&c).len(), v.len());
    assert!(finals.iter().all(|m| !first_round(&c).contains(m)));
    net.play_verdicts(&decide);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    for c in report["challenges"].as_array().unwrap() {
        assert_eq!(c["outcome"], "pass");
        let disputed = first_round(c).contains(&liar);
        assert_eq!(c["rounds"].as_u64(), Some(u64::from(disputed)));
    }
    assert!(report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["outcome"] == "accepted"));
    let r = row(&report, "validators", &liar);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("wrong"), 1_000_000)
    );
    for validator in v.iter().filter(|x| **x != liar) {
        let r = row(&report, "validators", validator);
        assert_eq!(r["slashed"], "0");
        assert_eq!(
            r["outcome"],
            if r["assigned"] == 0 {
                "idle"
            } else {
                "diligent"
            }
        );
    }
    assert_eq!(report["to_treasury"], "1000000");
}

#[test]
fn a_host_that_serves_one_validator_is_slashed_as_unavailable_and_nobody_else_pays() {
    let mut net = Net::new(&spec_with(json!({})), 2, 4);
    let h = net.hosts.clone();
    net.play_to_verify();
    // h0 fakes its work and serves each challenge to one validator only (the first to ask):
    // that one votes fail, every other one unavailable, the committee included.
    let first: BTreeMap<u64, String> = (0..2)
        .map(|g| (g, first_round(&net.challenge(&h[0], g))[0].clone()))
        .collect();
    let first_in = first.clone();
    let target = h[0].clone();
    let decide = move |validator: &str, host: &str, segment: u64| {
        Some(if host != target {
            "pass"
        } else if first[&segment] == validator {
            "fail"
        } else {
            "unavailable"
        })
    };
    net.play_verdicts(&decide);
    let report = net.chain.report(0);
    let h0 = row(&report, "hosts", &h[0]);
    assert_eq!(
        (h0["outcome"].as_str(), amount(&h0["slashed"])),
        (Some("unavailable"), 5_000_000)
    );
    assert_eq!(row(&report, "hosts", &h[1])["outcome"], "accepted");
    for c in report["challenges"].as_array().unwrap() {
        if c["host"] == h[0].as_str() {
            assert_eq!(
                (c["outcome"].as_str(), c["rounds"].as_u64()),
                (Some("unavailable"), Some(1))
            );
        }
    }
    // An unavailable vote agrees with the `unavailable` decision (more than half of V's stake
    // said so) and costs nothing; a round-0 `fail` on it held the leaves and served nobody (an
    // honest holder serves what it checked, and V would have read them from it): it pays the
    // unserved slash.
    let holders: BTreeSet<&String> = first_in.values().collect();
    for r in report["validators"].as_array().unwrap() {
        let who = r["address"].as_str().unwrap().to_string();
        let want = if holders.contains(&who) {
            "unserved"
        } else if r["assigned"] == 0 {
            "idle"
        } else {
            "diligent"
        };
        assert_eq!(r["outcome"], want);
        assert_eq!(r["slashed"] == "0", want != "unserved");
    }
}

/// Play to `dispute` with a one-picker spec (every challenge has one round-0 seat): the host's
/// picker says `unavailable` on segment 0 (the host refused it), `pass` on the rest.
fn refused_sole_seat() -> (Net, String, String) {
    let mut net = Net::new(&spec_with(json!({"verification": {"seats_cap": 1}})), 1, 4);
    let h = net.hosts[0].clone();
    net.play_to_verify();
    let seat = first_round(&net.challenge(&h, 0));
    assert_eq!(seat.len(), 1, "one picker: a sole round-0 seat");
    let seat = seat[0].clone();
    let s = seat.clone();
    let decide = move |validator: &str, _: &str, segment: u64| {
        Some(if validator == s && segment == 0 {
            "unavailable"
        } else {
            "pass"
        })
    };
    while net.phase() != "dispute" {
        net.play_round(&decide, &[h.clone()]);
    }
    (net, h, seat)
}

/// Open the sole seat's round-0 `unavailable`, then its re-vote `again`; everyone else opens.
fn open_with_revote(net: &mut Net, h: &str, seat: &str, again: &str) {
    assert_eq!(net.phase(), "dispute_reveal");
    net.reveal_verdict(seat, h, 0);
    let salt = hex(&verdict_salt(seat, h, 0));
    let mut msg = net.opening(seat, h, 0, again);
    msg["reveal_verdict"]["salt"] = json!(salt);
    net.chain.ok(seat, msg);
    net.reveal_round(&|_, _, _| false, &[]);
    net.settle();
}

#[test]
fn a_refused_sole_seat_re_votes_in_the_final_round_and_loses_nothing() {
    let (mut net, h, seat) = refused_sole_seat();
    // Its re-vote is due in `dispute` (round 2, after its round-0 seat), with every final voter.
    let entries: Vec<Value> = net
        .challenges(&seat)
        .into_iter()
        .filter(|c| c["segment"] == 0)
        .collect();
    let rounds: Vec<u64> = entries
        .iter()
        .map(|c| c["round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, vec![0, 2]);
    assert_eq!(
        (
            entries[1]["due"].as_bool(),
            entries[1]["committed"].as_bool()
        ),
        (Some(true), Some(false))
    );
    // The host served the final round: the seat read the leaves from a final voter and re-votes
    // `pass` like them.
    let e = net.epoch_number();
    let commitment = net.verdict_commitment(&seat, &h, 0, "pass");
    let revote = json!({"commit_verdict": {"epoch": e, "host": h, "segment": 0,
                                           "commitment": commitment}});
    net.chain.ok(&seat, revote.clone());
    let again = net.chain.refused(&seat, revote);
    assert!(again.contains("already committed"), "{again}");
    net.commit_round(&|_, _, _| Some("pass"));
    net.settle();
    assert_eq!(
        net.phase(),
        "dispute_reveal",
        "every final vote and the re-vote are in: early close"
    );
    open_with_revote(&mut net, &h, &seat, "pass");
    assert_eq!(net.phase(), "propose", "every opening is in: early close");
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &h)["outcome"], "accepted");
    assert_eq!(net.challenge_of(0, &h, 0)["outcome"], "pass");
    // Paid like every other diligent validator; nobody slashed.
    let r = row(&report, "validators", &seat);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("diligent"), 0)
    );
    let paid = amount(&r["reward"]);
    assert!(paid > 0);
    for v in net.validators.iter() {
        let r = row(&report, "validators", v);
        assert_eq!(
            (
                r["outcome"].as_str(),
                amount(&r["slashed"]),
                amount(&r["reward"])
            ),
            (Some("diligent"), 0, paid)
        );
    }
}

#[test]
fn a_sole_seat_that_does_not_re_vote_is_unpaid_and_a_re_vote_after_fail_must_repeat_it() {
    // Without a re-vote: excused (no holder contradicts it) but not paid, as before.
    let (mut net, h, seat) = refused_sole_seat();
    net.commit_round(&|v, _, g| {
        if g == 0 && v == seat.as_str() {
            None
        } else {
            Some("pass")
        }
    });
    net.settle();
    net.chain.wait_past_deadline();
    net.chain.ok(&h, json!({"advance": {}}));
    net.settle();
    net.reveal_round(&|_, _, _| false, &[]);
    net.settle();
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    let r = row(&report, "validators", &seat);
    assert_eq!(
        (
            r["outcome"].as_str(),
            amount(&r["slashed"]),
            amount(&r["reward"])
        ),
        (Some("unserved"), 0, 0)
    );

    // A committed re-vote that is not opened is a missed vote: silent.
    let (mut net, h, seat) = refused_sole_seat();
    let e = net.epoch_number();
    let commitment = net.verdict_commitment(&seat, &h, 0, "pass");
    net.chain.ok(
        &seat,
        json!({"commit_verdict": {"epoch": e, "host": h, "segment": 0,
                                                  "commitment": commitment}}),
    );
    net.commit_round(&|_, _, _| Some("pass"));
    net.settle();
    net.reveal_verdict(&seat, &h, 0); // its round-0 `unavailable` only
    net.reveal_round(&|v, _, g| v == seat && g == 0, &[]);
    net.settle();
    net.chain.wait_past_deadline();
    net.chain.ok(&h, json!({"advance": {}}));
    net.settle();
    let report = net.chain.report(0);
    assert_eq!(row(&report, "validators", &seat)["outcome"], "silent");

    // A seat that said `fail` in round 0 cannot take it back in its re-vote.
    let mut net = Net::new(&spec_with(json!({"verification": {"seats_cap": 1}})), 1, 4);
    let h = net.hosts[0].clone();
    net.play_to_verify();
    let seat = first_round(&net.challenge(&h, 0))[0].clone();
    let s = seat.clone();
    let decide =
        move |v: &str, _: &str, g: u64| Some(if v == s && g == 0 { "fail" } else { "pass" });
    while net.phase() != "dispute_reveal" {
        net.play_round(&decide, &[h.clone()]);
    }
    net.reveal_verdict(&seat, &h, 0);
    let mut take_back = net.opening(&seat, &h, 0, "pass");
    take_back["reveal_verdict"]["salt"] = json!(hex(&verdict_salt(&seat, &h, 0)));
    let err = net.chain.refused(&seat, take_back);
    assert!(err.contains("must repeat it"), "{err}");
}

#[test]
fn a_round_0_holder_that_serves_nobody_pays_when_the_final_vote_finds_it_unavailable() {
    // The last segment (every picker seats it): `holder` read the leaves and passes; the host
    // refuses everyone else, and the holder serves nobody: the final vote (all of V's other
    // stake) decides `unavailable`.
    let mut net = Net::new(&spec_with(json!({})), 1, 6);
    let h = net.hosts[0].clone();
    net.play_to_verify();
    let seats = first_round(&net.challenge(&h, 1));
    assert!(seats.len() >= 2, "{seats:?}");
    let holder = seats[0].clone();
    let hd = holder.clone();
    let decide = move |v: &str, _: &str, g: u64| {
        Some(if g != 1 || v == hd {
            "pass"
        } else {
            "unavailable"
        })
    };
    net.play_verdicts(&decide);
    let report = net.chain.report(0);
    assert_eq!(net.challenge_of(0, &h, 1)["outcome"], "unavailable");
    assert_eq!(row(&report, "hosts", &h)["outcome"], "unavailable");
    let r = row(&report, "validators", &holder);
    assert_eq!(r["outcome"], "unserved");
    assert!(amount(&r["slashed"]) > 0);
    for v in net.validators.iter().filter(|v| **v != holder) {
        let r = row(&report, "validators", v);
        assert_eq!(amount(&r["slashed"]), 0, "{v}: {r}");
    }
}

#[test]
fn a_copied_commitment_does_not_open_and_the_copier_is_silent() {
    let mut net = Net::new(&spec_with(json!({})), 1, 4);
    let h = net.hosts.clone();
    net.play_to_verify();
    let pair = first_round(&net.challenge(&h[0], 0));
    let (original, copier) = (pair[0].clone(), pair[1].clone());
    // The copier waits for the original's commitment and posts the same bytes.
    net.commit_verdict(&original, &h[0], 0, "pass");
    let seen = net.challenge(&h[0], 0)["votes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["validator"] == original.as_str())
        .unwrap()["commitment"]
        .as_str()
        .unwrap()
        .to_string();
    net.chain.ok(
        &copier,
        json!({"commit_verdict": {"epoch": 0, "host": h[0], "segment": 0, "commitment": seen}}),
    );
    let honest_rest = |_: &str, _: &str, _: u64| Some("pass");
    net.commit_round(&honest_rest);
    assert_eq!(net.phase(), "objection");
    net.objection_round(&h);
    assert_eq!(net.phase(), "verdict_reveal");
    net.reveal_verdict(&original, &h[0], 0);
    // It copies the original's opening too: the commitment binds the committer's address.
    let copied = net.opening(&original, &h[0], 0, "pass");
    let err = net.chain.refused(&copier, copied);
    assert!(
        err.starts_with("reveal_verdict: the opening does not match the verdict commitment"),
        "{err}"
    );
    net.reveal_round(&|v, host, g| v == copier && host == h[0] && g == 0, &h);
    net.chain.wait_past_deadline();
    net.chain.ok(&h[0], json!({"advance": {}}));
    net.settle();
    assert_eq!(
        net.phase(),
        "propose",
        "an undisputed challenge passes; the unopened copy is the copier's silence"
    );
    let report = net.chain.report(0);
    let r = row(&report, "validators", &copier);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("silent"), 1_000_000)
    );
    assert_eq!(row(&report, "validators", &original)["outcome"], "diligent");
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "accepted");
}

#[test]
fn traps_catch_a_validator_that_passes_without_replaying_and_a_lying_auditor_pays() {
    // A trap is valid when the final vote fails it at a distance within [tau, trap_max_distance]
    // (this harness's replays measure 0.5).
    let spec = spec_with(json!({"verification": {"trap_max_distance": "1"}}));
    let mut net = Net::new(&spec, 3, 4);
    let h = net.hosts.clone();
    // h0 sets a trap: segment 1 (the last, always challenged) is deliberately perturbed.
    // h1 claims a trap on segment 0, which it trained honestly: a lie.
    net.traps.insert(h[0].clone(), vec![1]);
    net.traps.insert(h[1].clone(), vec![0]);
    net.play_to_verify();
    // The lazy validator: one of those on h0's trap.
    let lazy = first_round(&net.challenge(&h[0], 1))[0].clone();
    let (auditor, lazy_decide) = (h[0].clone(), lazy.clone());
    let decide = move |validator: &str, host: &str, segment: u64| {
        let corrupted = host == auditor && segment == 1;
        Some(if corrupted && validator != lazy_decide {
            "fail"
        } else {
            "pass"
        })
    };
    net.play_verdicts(&decide);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    let trap = net.challenge(&h[0], 1);
    assert_eq!(
        (trap["trap"].as_bool(), trap["outcome"].as_str()),
        (Some(true), Some("fail"))
    );
    assert_eq!(trap["rounds"], 1, "an opened trap is always disputed");
    // The lazy validator pays the wrong slash; a valid trap leaves its host accepted (its Δ
    // enters aggregation) and earns it nothing more: a trap is not an income.
    let r = row(&report, "validators", &lazy);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("wrong"), 1_000_000)
    );
    let a = row(&report, "hosts", &h[0]);
    assert_eq!(
        (a["outcome"].as_str(), amount(&a["slashed"])),
        (Some("accepted"), 0)
    );
    assert_eq!(amount(&a["catcher_reward"]), 0);
    assert_eq!(a["traps"], json!([1]));
    // The lying trap-setter: everyone passed its "trap" in the final vote.
    let lie = net.challenge(&h[1], 0);
    assert_eq!(
        (lie["outcome"].as_str(), lie["rounds"].as_u64()),
        (Some("pass"), Some(1))
    );
    let liar = row(&report, "hosts", &h[1]);
    assert_eq!(
        (liar["outcome"].as_str(), amount(&liar["slashed"])),
        (Some("invalid"), 5_000_000)
    );
    assert_eq!(row(&report, "hosts", &h[2])["outcome"], "accepted");
    let accepted = net.chain.query(json!({"aggregation_inputs": {"epoch": 0}}));
    assert_eq!(accepted["hosts"].as_array().unwrap().len(), 2);
    // Nobody is paid a catcher share for a `pass`: the liar's slash goes to the treasury.
    assert_eq!(amount(&report["to_catchers"]), 0);
}

#[test]
fn a_dispute_nobody_decides_ends_unresolved_and_only_the_silent_pay() {
    let spec = spec_with(json!({}));
    let mut net = Net::new(&spec, 1, 5);
    let h = net.hosts.clone();
    net.play_to_verify();
    let speaker = first_round(&net.challenge(&h[0], 0))[0].clone();
    // Only the speaker ever votes on segment 0; every other member of it stays silent.
    let s = speaker.clone();
    let decide = move |validator: &str, _: &str, segment: u64| {
        if segment == 0 && validator != s {
            None
        } else {
            Some("pass")
        }
    };
    net.play_verdicts(&decide);
    // Nobody accepted: the epoch closed with θ unchanged.
    assert_eq!((net.epoch_number(), net.phase().as_str()), (1, "join"));
    let c = net.challenge_of(0, &h[0], 0);
    assert_eq!(
        (c["outcome"].as_str(), c["rounds"].as_u64()),
        (Some("unresolved"), Some(1))
    );
    // A seat did not commit: disputed; every member of V sits on it, and one fifth of the
    // stake is not more than half of it.
    let members = c["votes"].as_array().unwrap();
    assert_eq!(members.len(), 5);
    assert_eq!(
        members.iter().filter(|x| x["round"] == 1).count(),
        5 - first_round(&c).len()
    );
    let report = net.chain.report(0);
    let host = row(&report, "hosts", &h[0]);
    assert_eq!(
        (host["outcome"].as_str(), amount(&host["slashed"])),
        (Some("excluded"), 0)
    );
    assert_eq!(report["agreed"], false);
    for m in members {
        let who = m["validator"].as_str().unwrap();
        let r = row(&report, "validators", who);
        if who == speaker {
            assert_eq!(
                (r["outcome"].as_str(), amount(&r["slashed"])),
                (Some("diligent"), 0)
            );
        } else {
            assert_eq!(
                (r["outcome"].as_str(), amount(&r["slashed"])),
                (Some("silent"), 1_000_000)
            );
        }
    }
    let closed = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(closed["accepted"], json!([]));
}

#[test]
fn refusals_name_the_message_and_the_reason() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let stranger = net.chain.addr("stranger");
    let commit = net.commit_msg(&h[0], 2);
    assert_eq!(
        net.chain.refused(&h[0], commit),
        "commit: epoch 0 is in phase join; commit is accepted in phase train only"
    );
    let join = json!({"join": {"epoch": 0, "beacon_commit": digest("c")}});
    assert_eq!(
        net.chain.refused(&stranger, join.clone()),
        format!("join: {stranger} is not a member; bond first")
    );
    let err = net.chain.execute(&h[0], join, 5).unwrap_err().to_string();
    assert_eq!(err, "join: does not accept funds, got 5inj");
    for who in net.everyone() {
        net.join(&who);
    }
    assert_eq!(
        net.chain.refused(&h[0], net.commit_msg(&h[0], 3)),
        "commit: segments is 3, but the run has 1 to 2 segments per epoch"
    );
    let mut bad_trap = net.commit_msg(&h[0], 2);
    bad_trap["commit"]["trap_commit"] = json!("XY");
    assert_eq!(
        net.chain.refused(&h[0], bad_trap),
        "commit: trap_commit must be 64 lowercase hex characters, got \"XY\""
    );
    for host in h.iter() {
        net.commit(host);
    }
    for who in net.everyone() {
        net.reveal(&who);
    }
    let (host, segment) = net.to_commit(&v[0])[0].clone();
    let by_host = json!({"commit_verdict": {"epoch": 0, "host": host, "segment": segment,
                                            "commitment": digest("c")}});
    assert_eq!(
        net.chain.refused(&h[1], by_host),
        format!(
            "commit_verdict: {} is not assigned to host {host} segment {segment} of epoch 0 in this round",
            h[1]
        )
    );
    let early = net.opening(&v[0], &host, segment, "pass");
    assert_eq!(
        net.chain.refused(&v[0], early),
        "reveal_verdict: epoch 0 is in phase verify; reveal_verdict is accepted in phase verdict_reveal or dispute_reveal only"
    );
    net.commit_verdict(&v[0], &host, segment, "pass");
    let again = json!({"commit_verdict": {"epoch": 0, "host": host, "segment": segment,
                                          "commitment": digest("c")}});
    let err = net.chain.refused(&v[0], again);
    assert!(err.contains("already committed a verdict on host"), "{err}");
    net.commit_round(&honest);
    assert_eq!(net.phase(), "objection");
    // Trap openings: the host's own, in order, within S, matching its commitment.
    let traps = |segments: Value, salt: String| json!({"reveal_traps": {"epoch": 0, "segments": segments, "salt": salt}});
    let salt = hex(&trap_salt(&h[0]));
    assert_eq!(
        net.chain.refused(&h[0], traps(json!([1, 0]), salt.clone())),
        "reveal_traps: trap segments must be distinct and in ascending order"
    );
    assert_eq!(
        net.chain.refused(&h[0], traps(json!([2]), salt.clone())),
        "reveal_traps: trap segment 2 is not a segment (the run has 2 per epoch)"
    );
    let err = net.chain.refused(&h[0], traps(json!([0]), salt.clone()));
    assert!(
        err.starts_with("reveal_traps: the opening does not match the trap commitment"),
        "{err}"
    );
    let err = net.chain.refused(&v[0], traps(json!([]), salt));
    assert!(
        err.contains("joined epoch 0 as a validator; only hosts may reveal_traps"),
        "{err}"
    );
    net.open_traps(&h[0]);
    let err = net
        .chain
        .refused(&h[0], traps(json!([]), hex(&trap_salt(&h[0]))));
    assert!(err.contains("already opened its traps"), "{err}");
    // `ready`: only from a seated member of V, once, naming its own committed round-0 seats in
    // order.
    let ready = |objections: Value| json!({"ready": {"epoch": 0, "objections": objections}});
    assert!(net
        .chain
        .refused(&h[1], ready(json!([])))
        .contains("has no round-0 seat in epoch 0"));
    let seated = v
        .iter()
        .find(|x| net.chain.status(x)["ready_due"] == true)
        .unwrap()
        .clone();
    let mine = net.challenges(&seated)[0].clone();
    let (mh, mg) = (
        mine["host"].as_str().unwrap().to_string(),
        mine["segment"].as_u64().unwrap(),
    );
    assert_eq!(
        net.chain.refused(
            &seated,
            ready(json!([{"host": mh, "segment": mg}, {"host": mh, "segment": mg}]))
        ),
        "ready: objections must be distinct and in ascending order of (host, segment)"
    );
    assert!(net
        .chain
        .refused(&seated, ready(json!([{"host": h[1], "segment": 7}])))
        .contains("holds no committed round-0 seat on host"));
    net.objection_round(&h);
    assert_eq!(net.phase(), "verdict_reveal");
    // An opening of another outcome, another distance or salt does not match.
    let lie = net.opening(&v[0], &host, segment, "fail");
    let err = net.chain.refused(&v[0], lie);
    assert!(
        err.starts_with("reveal_verdict: only pass verdicts open in verdict_reveal"),
        "{err}"
    );
    let mut salted = net.opening(&v[0], &host, segment, "pass");
    salted["reveal_verdict"]["salt"] = json!(digest("another salt"));
    let err = net.chain.refused(&v[0], salted);
    assert!(
        err.starts_with("reveal_verdict: the opening does not match"),
        "{err}"
    );
    let mut bad = net.opening(&v[0], &host, segment, "pass");
    bad["reveal_verdict"]["distance"] = json!("0.50");
    assert_eq!(
        net.chain.refused(&v[0], bad),
        "reveal_verdict: distance must be a canonical decimal string like \"0.0123\", got \"0.50\""
    );
    net.reveal_verdict(&v[0], &host, segment);
    let err = net
        .chain
        .refused(&v[0], net.opening(&v[0], &host, segment, "pass"));
    assert!(err.contains("already opened its verdict"), "{err}");
}

#[test]
fn participant_status_follows_one_member_through_the_epoch() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let status = net.chain.status(&h[0]);
    assert_eq!(
        (
            status["joined"].as_bool(),
            status["role"].is_null(),
            status["phase"].as_str()
        ),
        (Some(false), true, Some("join"))
    );
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    assert_eq!(net.chain.status(&h[0])["committed"], true);
    net.commit(&h[1]);
    for who in net.everyone() {
        net.reveal(&who);
    }
    let status = net.chain.status(&v[0]);
    assert_eq!(
        (
            status["assigned"].as_u64(),
            status["to_commit"].as_u64(),
            status["to_reveal"].as_u64()
        ),
        (Some(4), Some(4), Some(0))
    );
    assert_eq!(net.chain.status(&h[0])["challenged"], true);
    let (host, segment) = net.to_commit(&v[0])[0].clone();
    net.commit_verdict(&v[0], &host, segment, "pass");
    let status = net.chain.status(&v[0]);
    assert_eq!(
        (status["to_commit"].as_u64(), status["to_reveal"].as_u64()),
        (Some(3), Some(0))
    );
    net.commit_round(&honest);
    assert_eq!(net.phase(), "objection");
    assert_eq!(net.chain.status(&v[0])["ready_due"], true);
    assert_eq!(net.chain.status(&h[0])["traps_opened"], false);
    net.open_traps(&h[0]);
    assert_eq!(net.chain.status(&h[0])["traps_opened"], true);
    net.open_traps(&h[1]);
    net.ready(&v[0]);
    assert_eq!(net.phase(), "verdict_reveal");
    assert_eq!(net.chain.status(&v[0])["ready_due"], false);
    assert_eq!(net.chain.status(&v[0])["to_reveal"], 4);
    net.reveal_round(&|_, _, _| false, &[]);
    let status = net.chain.status(&v[0]);
    assert_eq!(
        (status["voted"].as_u64(), status["to_reveal"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(
        (status["outcome"].as_str(), status["phase"].as_str()),
        (Some("diligent"), Some("propose"))
    );
    assert_eq!(net.chain.status(&h[0])["outcome"], "accepted");
    net.propose(&h[0], &digest("theta"));
    assert_eq!(net.chain.status(&h[0])["proposed"], true);
    let stranger = net.chain.addr("stranger");
    assert_eq!(net.chain.status(&stranger)["joined"], false);
    let msg = parse(json!({"participant": {"address": "inj1bad"}}));
    let err = contract::query(net.chain.deps.as_ref(), net.chain.env(), msg).unwrap_err();
    assert!(
        err.to_string().starts_with("participant: invalid address"),
        "{err}"
    );
}

/// A store that counts the records a query reads (point reads and iterated records).
struct CountingStorage<'a> {
    inner: &'a dyn Storage,
    reads: Cell<usize>,
}

impl Storage for CountingStorage<'_> {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.reads.set(self.reads.get() + 1);
        self.inner.get(key)
    }

    fn range<'b>(
        &'b self,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        order: Order,
    ) -> Box<dyn Iterator<Item = Record> + 'b> {
        let reads = &self.reads;
        Box::new(self.inner.range(start, end, order).inspect(move |_| {
            reads.set(reads.get() + 1);
        }))
    }

    fn set(&mut self, _: &[u8], _: &[u8]) {
        unreachable!("a query writes nothing")
    }

    fn remove(&mut self, _: &[u8]) {
        unreachable!("a query writes nothing")
    }
}

/// An epoch of `hosts` hosts and 4 validators in which every challenge is disputed (every seat
/// but v0's says `fail` and objects; v0 passes everything), played to its end (every host
/// invalid: the epoch closes without a proposal).
fn disputed_epoch(hosts: usize) -> Net {
    // Windows long enough for a transaction per block from every member.
    let blocks = json!(1000);
    let phases = json!({"phases": {"join_blocks": blocks, "train_blocks": blocks,
        "reveal_blocks": blocks, "verify_blocks": blocks, "verdict_reveal_blocks": blocks,
        "propose_blocks": blocks}});
    let mut net = Net::new(&spec_with(phases), hosts, 4);
    net.play_to_verify();
    let lazy = net.validators[0].clone();
    let decide = move |v: &str, _: &str, _: u64| Some(if v == lazy { "pass" } else { "fail" });
    net.play_verdicts(&decide);
    net
}

#[test]
fn a_report_of_many_hosts_is_served_in_bounded_pages_that_assemble_to_the_whole_epoch() {
    let net = disputed_epoch(24);
    let chain = &net.chain;
    let whole = chain.report(0);
    let challenges = whole["challenges"].as_array().unwrap();
    assert!(challenges.len() >= 24, "every host challenged");
    assert!(
        challenges.iter().all(|c| c["rounds"] == 1),
        "every challenge disputed"
    );
    assert_eq!(whole["hosts"].as_array().unwrap().len(), 24);
    assert_eq!(whole["phase"], "closed");
    assert_eq!(whole["validators"].as_array().unwrap().len(), 4);
    // The assembled report is what one whole-epoch tally gives (what the unpaged report showed):
    // every validator's counts, every challenge in (host, segment) order.
    let tally = Tally::of_epoch(&chain.deps.storage, 0).unwrap();
    let keys: Vec<(String, u64)> = challenges
        .iter()
        .map(|c| {
            (
                c["host"].as_str().unwrap().to_string(),
                c["segment"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = tally
        .challenges
        .keys()
        .map(|(h, s)| (h.clone(), u64::from(*s)))
        .collect();
    assert_eq!(keys, expected);
    for v in whole["validators"].as_array().unwrap() {
        let stats = tally.validators[v["address"].as_str().unwrap()];
        let want = [
            stats.assigned,
            stats.committed,
            stats.voted,
            stats.against,
            stats.unavailable,
            stats.unserved,
        ];
        for (key, n) in COUNTS.iter().zip(want) {
            assert_eq!(v[*key], json!(n), "{key} of {}", v["address"]);
        }
        assert!(stats.assigned > 10);
    }
    assert_eq!(
        row(&whole, "validators", &net.validators[0])["outcome"],
        "wrong"
    );
    // Any page size assembles to the same report; small pages take many queries.
    for limit in [1, 2, 7, REPORT_PAGE] {
        let pages = chain.report_pages(0, Some(limit));
        assert_eq!(assemble(&pages), whole, "pages of {limit}");
        if limit < 28 {
            assert!(
                pages.len() as u32 >= 28 / limit,
                "{} pages of {limit}",
                pages.len()
            );
        }
    }
    // No page grows with the epoch: a page of `limit` units reads at most a fixed number of
    // records per unit (a unit pays for 16 votes, each read with its commitment and re-vote), and
    // its answer stays far below a node's 32 MiB query memory, while the whole epoch reads many
    // pages' worth.
    let read = |start_after: &Value, limit: u32| -> (usize, usize, Value) {
        let msg = json!({"report": {"epoch": 0, "start_after": start_after, "limit": limit}});
        let (reads, answer) = counted_query_bytes(chain, msg);
        (
            reads,
            answer.len(),
            serde_json::from_slice(&answer).unwrap(),
        )
    };
    let per_unit = 16 + 3 * REPORT_VOTES_PER_UNIT;
    for limit in [4, 16] {
        let bound = 16 + (limit as usize + 1) * per_unit;
        let (mut start_after, mut total, mut most) = (Value::Null, 0, 0);
        loop {
            let (reads, bytes, page) = read(&start_after, limit);
            assert!(reads <= bound, "{reads} records read by a page of {limit}");
            assert!(bytes <= 64 * 1024 * (limit as usize + 1), "{bytes} bytes");
            total += reads;
            most = most.max(reads);
            match page.get("next") {
                Some(n) => start_after = n.clone(),
                None => break,
            }
        }
        assert!(
            total > 28 / limit as usize * most / 2,
            "{total} records, {most} at most a page"
        );
    }
}

#[test]
fn a_host_whose_votes_outgrow_a_page_is_split_over_pages_a_challenge_at_a_time() {
    // 2 hosts with 2 challenges each and 20 validators, every challenge disputed: each final vote
    // seats all of V (a challenge bounds 1 + 20 / 16 = 2 units, a host 1 + 2 × 2 = 5).
    let blocks = json!(1000);
    let spec = spec_with(json!({
        "phases": {"join_blocks": blocks, "train_blocks": blocks, "reveal_blocks": blocks,
                   "verify_blocks": blocks, "verdict_reveal_blocks": blocks,
                   "propose_blocks": blocks},
        "verification": {"challenges_k": 2}}));
    let mut net = Net::new(&spec, 2, 20);
    net.play_to_verify();
    let lazy = net.validators[0].clone();
    let decide = move |v: &str, _: &str, _: u64| Some(if v == lazy { "pass" } else { "fail" });
    net.play_verdicts(&decide);
    let chain = &net.chain;
    let pages = chain.report_pages(0, None);
    assert!(pages.iter().all(|p| p.get("next_segment").is_none()));
    let whole = assemble(&pages);
    let challenges = whole["challenges"].as_array().unwrap();
    assert_eq!(challenges.len(), 4);
    assert!(challenges
        .iter()
        .all(|c| c["rounds"] == 1 && c["votes"].as_array().unwrap().len() == 20));
    let host = |i: usize| {
        net.hosts
            .iter()
            .min()
            .cloned()
            .filter(|_| i == 0)
            .unwrap_or_else(|| net.hosts.iter().max().cloned().unwrap())
    };
    let (first, second) = (host(0), host(1));
    let segments: Vec<u64> = challenges
        .iter()
        .filter(|c| c["host"] == json!(first))
        .map(|c| c["segment"].as_u64().unwrap())
        .collect();
    assert_eq!(segments.len(), 2);
    // Any page size assembles to the same report; below a host's 5 units its challenges are
    // split over pages, each page holding at least one, the host's line on its first page only.
    for limit in 1..=6u32 {
        let pages = chain.report_pages(0, Some(limit));
        assert_eq!(assemble(&pages), whole, "pages of {limit}");
        let split = pages
            .iter()
            .filter(|p| p.get("next_segment").is_some())
            .count();
        assert_eq!(split > 0, limit < 5, "pages of {limit}: {split} split");
        for p in pages.iter() {
            let n = p["challenges"].as_array().unwrap().len();
            if limit < 5 {
                assert!(
                    n >= 1 || !p["validators"].as_array().unwrap().is_empty(),
                    "{p}"
                );
                assert!(
                    n <= (limit as usize).max(2) / 2,
                    "{n} challenges in a page of {limit}"
                );
            }
            if let Some(s) = p.get("next_segment") {
                assert!(n >= 1, "a page stopped inside a host holds a challenge");
                let h = p["next"].as_str().unwrap();
                assert!(p["challenges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|c| c["host"] == json!(h)));
                assert!(whole["challenges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["host"] == json!(h) && c["segment"] == *s));
            }
        }
    }
    // Cursor edges. Resuming at a host's first challenge is its first page less its line.
    let page = |msg: Value| chain.query(json!({ "report": msg }));
    let at = |h: &str, s: u64, limit: u32| {
        page(json!({"epoch": 0, "start_after": h, "start_segment": s, "limit": limit}))
    };
    let opened = chain
        .report_pages(0, Some(2))
        .into_iter()
        .find(|p| {
            p["hosts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["address"] == json!(first))
        })
        .unwrap();
    assert_eq!(opened["hosts"].as_array().unwrap().len(), 1);
    assert!(opened["validators"].as_array().unwrap().is_empty());
    assert_eq!(opened["hosts"][0]["address"], json!(first));
    assert_eq!(opened["next"], json!(first));
    assert_eq!(opened["next_segment"], json!(segments[1]));
    let resumed = at(&first, segments[0], 2);
    assert!(resumed["hosts"].as_array().unwrap().is_empty());
    assert_eq!(resumed["challenges"], opened["challenges"]);
    assert_eq!(resumed["counts"], opened["counts"]);
    // A segment between two challenges resumes at the next; past the last, the page is the one
    // after the host.
    if segments[1] > segments[0] + 1 {
        let between = at(&first, segments[0] + 1, 2);
        assert_eq!(between["challenges"][0]["segment"], json!(segments[1]));
    }
    for (h, limit) in [(&first, 2), (&second, 32)] {
        let past = at(h, segments[1] + 1000, limit);
        assert!(past["challenges"].as_array().unwrap().is_empty());
        assert_eq!(
            past,
            page(json!({"epoch": 0, "start_after": h, "limit": limit}))
        );
    }
    // A segment without its host, or at a validator or a stranger, is refused.
    let refused = |msg: Value| -> String {
        let msg = json!({ "report": msg }).to_string();
        let msg = parse_json("query message", msg.as_bytes()).unwrap();
        match contract::query(chain.deps.as_ref(), chain.env(), msg) {
            Ok(_) => panic!("answered"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(
        refused(json!({"epoch": 0, "start_segment": 0})),
        "report: start_segment needs start_after, the host it is in"
    );
    for who in [net.validators[3].clone(), "stranger".to_string()] {
        assert_eq!(
            refused(json!({"epoch": 0, "start_after": who, "start_segment": 0})),
            format!("report: start_segment: {who} is not a challenged host of epoch 0")
        );
    }
}

#[test]
fn bad_report_pages_are_refused_with_the_reason() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    net.play_to_verify();
    let refused = |msg: Value| -> String {
        let msg = parse_json("query message", msg.to_string().as_bytes()).unwrap();
        match contract::query(net.chain.deps.as_ref(), net.chain.env(), msg) {
            Ok(_) => panic!("answered"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(
        refused(json!({"report": {"epoch": 0, "limit": 0}})),
        format!("report: limit must be between 1 and {REPORT_PAGE}, got 0")
    );
    assert_eq!(
        refused(json!({"report": {"epoch": 0, "limit": REPORT_PAGE + 1}})),
        format!(
            "report: limit must be between 1 and {REPORT_PAGE}, got {}",
            REPORT_PAGE + 1
        )
    );
    assert!(
        refused(json!({"report": {"epoch": 0, "start_after": "x".repeat(300)}}))
            .starts_with("report: start_after is longer than an address")
    );
    assert!(refused(json!({"report": {"epoch": 3}})).contains("epoch 3 has not started"));
    let negative = json!({"report": {"epoch": 0, "limit": -1}}).to_string();
    let error = parse_json::<QueryMsg>("query message", negative.as_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("invalid value: integer `-1`"),
        "{error}"
    );
    // A cursor past every participant is an empty last page, with the header.
    let last = net
        .chain
        .query(json!({"report": {"epoch": 0, "start_after": "z"}}));
    assert_eq!(last["hosts"], json!([]));
    assert_eq!(last["phase"], "verify");
    assert!(last.get("next").is_none());
}

#[test]
fn aggregation_inputs_page_through_the_accepted_hosts() {
    let mut net = Net::new(&spec_with(json!({})), 5, 2);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    for host in h[..4].iter() {
        net.commit(host);
    }
    let none = net.chain.query(json!({"aggregation_inputs": {"epoch": 0}}));
    assert!(none["hosts"].as_array().unwrap().is_empty());
    net.chain.wait_past_deadline();
    net.chain.ok(&v[0], json!({"advance": {}}));
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.play_verdicts(&honest);
    let mut accepted: Vec<String> = h[..4].to_vec();
    accepted.sort();
    let mut seen = Vec::new();
    let mut start_after: Option<String> = None;
    loop {
        let page = net.chain.query(json!({"aggregation_inputs": {
            "epoch": 0, "start_after": start_after, "limit": 3}}));
        let hosts = page["hosts"].as_array().unwrap().clone();
        for item in hosts.iter() {
            let address = item["address"].as_str().unwrap().to_string();
            let i = h.iter().position(|x| *x == address).unwrap();
            assert_eq!(item["endpoint"], format!("http://host-{i}:8700"));
            assert_eq!(item["delta_hash"], digest(&format!("delta {address}")));
            seen.push(address);
        }
        if hosts.len() < 3 {
            break;
        }
        start_after = seen.last().cloned();
    }
    assert_eq!(
        seen, accepted,
        "every accepted host once, in address order; absent h4 not"
    );
}

#[test]
fn without_verification_reveal_close_accepts_every_committed_host() {
    let spec = spec_with(json!({"verification": {"enabled": false}}));
    let mut net = Net::new(&spec, 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    net.commit(&h[1]);
    net.reveal(&h[0]);
    net.reveal(&h[1]);
    let response = net.reveal(&v[0]);
    assert_eq!(attr(&response, "finalize", "accepted"), Some("2"));
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    assert!(report["challenges"].as_array().unwrap().is_empty());
    assert_eq!(row(&report, "validators", &v[0])["outcome"], "idle");
    assert_eq!(net.chain.paid[&h[0]], 400_000);
    assert!(!net.chain.paid.contains_key(&v[0]));
}

// -- paged closes ---------------------------------------------------------------------------------

/// What one epoch settled, without the heights (a paged close takes more blocks): the report,
/// every member, the books, every bank send, the next epoch's θ and previous seed.
struct Settled {
    report: Value,
    members: Value,
    accounting: Value,
    paid: BTreeMap<String, u128>,
    next: (Value, Value),
    /// `advance`s sent to finish the paged closes: (reveal close, finalize).
    advances: (u32, u32),
}

/// One epoch with every kind of outcome, settled with pages of `settle_page` records: 7 hosts
/// (h0 cheats on every segment, h1 never commits, h2 never reveals, h3 is an auditor with a trap
/// on segment 1, the others honest) and 6 validators (v0 passes everything without replaying,
/// v1 stays silent, v5 never reveals, the others honest).
fn settle_mixed_epoch(settle_page: Option<u32>) -> Settled {
    let spec = spec_with(json!({"verification": {"challenges_k": 2, "trap_max_distance": "1"}}));
    let mut net = Net::with_page(&spec, 7, 6, settle_page);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.traps.insert(h[3].clone(), vec![1]);
    for who in net.everyone() {
        net.join(&who);
    }
    for host in h.iter().filter(|x| **x != h[1]) {
        net.commit(host);
    }
    net.chain.wait_past_deadline();
    net.chain.ok(&h[0], json!({"advance": {}}));
    for who in net.everyone() {
        if who != h[2] && who != v[5] {
            net.reveal(&who);
        }
    }
    // The reveal phase waits for h2 and v5: close it at its deadline.
    net.chain.wait_past_deadline();
    net.chain.ok(&h[0], json!({"advance": {}}));
    let reveal_advances = net.settle();
    assert_eq!(net.phase(), "verify");
    let (cheater, auditor, lazy, silent) = (h[0].clone(), h[3].clone(), v[0].clone(), v[1].clone());
    let decide = move |validator: &str, host: &str, segment: u64| {
        if validator == silent {
            return None;
        }
        let bad = host == cheater || (host == auditor && segment == 1);
        Some(if bad && validator != lazy {
            "fail"
        } else {
            "pass"
        })
    };
    let hosts = h.clone();
    let mut finalize_advances = 0;
    for _ in 0..8 {
        let phase = net.phase();
        match phase.as_str() {
            "verify" | "dispute" => {
                net.commit_round(&decide);
            }
            "objection" => {
                net.objection_round(&hosts);
            }
            "verdict_reveal" | "dispute_reveal" => {
                net.reveal_round(&|_, _, _| false, &hosts);
            }
            _ => break,
        }
        finalize_advances += net.settle();
        if net.phase() == phase {
            net.chain.wait_past_deadline();
            net.chain.ok(&h[0], json!({"advance": {}}));
            finalize_advances += net.settle();
        }
    }
    assert_eq!(net.phase(), "propose");
    let model = digest("model 1");
    let accepted: Vec<String> = net.chain.epoch()["accepted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for host in accepted {
        if net.epoch_number() != 0 {
            break;
        }
        net.propose(&host, &model);
    }
    let next = net.chain.epoch();
    assert_eq!(next["epoch"], 1);
    let mut report = net.chain.report(0);
    for key in ["phase_deadline", "started_at"] {
        report.as_object_mut().unwrap().remove(key);
    }
    Settled {
        report,
        members: net.chain.query(json!({"members": {"limit": 100}})),
        accounting: net.chain.query(json!({"accounting": {}})),
        paid: net.chain.paid.clone(),
        next: (next["model_hash"].clone(), next["prev_seed"].clone()),
        advances: (reveal_advances, finalize_advances),
    }
}

#[test]
fn a_paged_close_settles_exactly_what_the_one_shot_close_settles() {
    // One page holds the whole epoch: both closes run inside the transactions that start them.
    let one_shot = settle_mixed_epoch(Some(1000));
    assert_eq!(one_shot.advances, (0, 0));
    // Every kind of outcome is there, so the comparison covers every path of finalize.
    let report = &one_shot.report;
    let outcomes = |role: &str| -> Vec<String> {
        report[role]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["outcome"].as_str().unwrap().to_string())
            .collect()
    };
    // (`absent` is `absent_excused` here, a first miss: its record is written in `assign`.)
    for o in ["invalid", "absent_excused", "no_reveal", "accepted"] {
        assert!(
            outcomes("hosts").contains(&o.to_string()),
            "{o} in {:?}",
            outcomes("hosts")
        );
    }
    for o in ["wrong", "silent", "no_reveal", "diligent"] {
        assert!(
            outcomes("validators").contains(&o.to_string()),
            "{o} in {:?}",
            outcomes("validators")
        );
    }
    assert!(amount(&report["to_catchers"]) > 0 && amount(&report["rewards_total"]) > 0);
    for page in [1, 2, 3, 5, 64] {
        let paged = settle_mixed_epoch(Some(page));
        assert_eq!(paged.report, one_shot.report, "page {page}");
        assert_eq!(paged.members, one_shot.members, "page {page}");
        assert_eq!(paged.accounting, one_shot.accounting, "page {page}");
        assert_eq!(paged.paid, one_shot.paid, "page {page}");
        assert_eq!(paged.next, one_shot.next, "page {page}");
        if page == 1 {
            // One record per transaction, the first of each close in the transaction that
            // started it: 11 reveals + 13 participants to close reveal; the closes of
            // objection and verdict_reveal walk the 5 challenged hosts once each; the close of
            // dispute_reveal walks them again and runs on into finalize (3 × 13 participants).
            assert_eq!(
                paged.advances,
                (11 + 13 - 1, (5 - 1) + (5 - 1) + (5 + 3 * 13 - 1))
            );
        }
    }
}

#[test]
fn while_a_close_runs_its_phase_reads_due_and_refuses_its_messages() {
    let mut net = Net::with_page(&spec_with(json!({})), 4, 3, Some(2));
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    for host in h.iter() {
        net.commit(host);
    }
    for who in net.everyone() {
        if who != v[2] {
            net.reveal(&who);
        }
    }
    net.chain.wait_past_deadline();
    let response = net.chain.ok(&h[0], json!({"advance": {}}));
    let at = net.chain.height;
    // The first page ran: two reveals hashed, no seed yet, the phase still `reveal`.
    assert_eq!(attr(&response, "wasm", "transitions"), None);
    let epoch = net.chain.epoch();
    assert_eq!(
        (
            epoch["phase"].as_str(),
            epoch["closing"].as_str(),
            epoch["seed"].is_null()
        ),
        (Some("reveal"), Some("seed"), true)
    );
    assert_eq!(epoch["phase_deadline"].as_u64(), Some(at));
    // The late reveal is refused: the close has begun.
    let e = net.epoch_number();
    let late = json!({"reveal": {"epoch": e, "secret": hex(&secret(&v[2]))}});
    assert_eq!(
        net.chain.refused(&v[2], late),
        "reveal: epoch 0 is closing phase reveal page by page; send advance"
    );
    // Any message moves it on, not only `advance`: a bond does a page too.
    net.chain.pay(
        &v[2],
        json!({"bond": {"role": "validator", "endpoint": "http://v"}}),
        10,
    );
    let sent = net.settle();
    assert!(sent > 0);
    let epoch = net.chain.epoch();
    assert_eq!(
        (epoch["phase"].as_str(), epoch["closing"].is_null()),
        (Some("verify"), true)
    );
    // The next phase's window counts from the page that ended the close.
    assert_eq!(
        epoch["phase_deadline"].as_u64(),
        Some(net.chain.height + 50)
    );
    assert_eq!(
        row(&net.chain.report(0), "validators", &v[2])["outcome"],
        "no_reveal"
    );
    // Nothing is due once the close is over.
    assert!(net
        .chain
        .refused(&h[0], json!({"advance": {}}))
        .starts_with("advance: nothing is due"));
}

#[test]
fn without_verification_a_paged_reveal_close_runs_on_into_a_paged_finalize() {
    let spec = spec_with(json!({"verification": {"enabled": false},
                                "phases": {"min_validators": 0}}));
    let settle = |page: Option<u32>| {
        let mut net = Net::with_page(&spec, 5, 0, page);
        for who in net.everyone() {
            net.join(&who);
        }
        for host in net.hosts.clone() {
            net.commit(&host);
        }
        for who in net.everyone() {
            net.reveal(&who);
        }
        let advances = net.settle();
        assert_eq!(net.phase(), "propose");
        let mut report = net.chain.report(0);
        for key in ["phase_deadline", "started_at"] {
            report.as_object_mut().unwrap().remove(key);
        }
        (report, net.chain.paid.clone(), advances)
    };
    let (one_report, one_paid, one_advances) = settle(None);
    assert_eq!(one_advances, 0);
    let (report, paid, advances) = settle(Some(1));
    assert_eq!((report, paid), (one_report.clone(), one_paid));
    // 5 reveals, 5 participants to assign, 3 × 5 to finalize, one per transaction.
    assert_eq!(advances, 5 + 5 + 3 * 5 - 1);
    // The hosts' 80 % of the reward: no validator is diligent, their share stays in the pool.
    assert_eq!(amount(&one_report["rewards_total"]), 800_000);
}

/// The unbonding rule (`docs/network.md`, "Spec rules that the game needs"): with the fewest
/// unbonding epochs a spec may set, a cheater that unbonds everything while it is being verified
/// cannot claim before its epoch's finalize, even when finalize runs over many transactions, and
/// the slash takes what it unbonded.
#[test]
fn an_unbond_during_verify_cannot_escape_the_slash_of_a_paged_finalize() {
    let spec = spec_with(json!({"economics": {"unbonding_epochs": 1}}));
    let mut net = Net::with_page(&spec, 3, 3, Some(2));
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let cheater = h[0].clone();
    net.play_to_verify();
    net.chain.ok(
        &cheater,
        json!({"unbond": {"amount": HOST_BOND.to_string()}}),
    );
    let member = net.chain.query(json!({"member": {"address": cheater}}));
    assert_eq!(member["bonded"], "0");
    assert_eq!(
        member["unbonding"],
        json!([{"amount": HOST_BOND.to_string(), "release_epoch": 1}])
    );
    let too_early = "claim: nothing to claim at epoch 0; the next release is at epoch 1";
    assert_eq!(net.chain.refused(&cheater, json!({"claim": {}})), too_early);
    // Every validator fails the cheater's segments and passes the others'.
    let verdicts = |_: &str, host: &str, _: u64| Some(if host == h[0] { "fail" } else { "pass" });
    net.commit_round(&verdicts);
    assert_eq!(net.phase(), "objection");
    net.objection_round(&h);
    net.settle();
    assert_eq!(net.phase(), "verdict_reveal");
    net.reveal_round(&|_, _, _| false, &h);
    net.settle();
    assert_eq!(
        net.phase(),
        "dispute",
        "the cheater's challenges were objected to"
    );
    net.commit_round(&verdicts);
    assert_eq!(net.phase(), "dispute_reveal");
    net.reveal_round(&|_, _, _| false, &h);
    // The close of the final round runs two records per transaction: the cheater tries to claim
    // before every page, through every stage of finalize.
    let mut stages = Vec::new();
    while let Some(stage) = net.chain.epoch()["closing"].as_str().map(str::to_string) {
        assert_eq!(net.chain.refused(&cheater, json!({"claim": {}})), too_early);
        stages.push(stage);
        net.chain.ok(&v[0], json!({"advance": {}}));
    }
    for stage in ["outcomes", "slashes", "rewards"] {
        assert!(
            stages.iter().filter(|s| *s == stage).count() >= 2,
            "finalize's {stage} stage took one transaction: {stages:?}"
        );
    }
    assert_eq!(net.phase(), "propose");
    assert_eq!(net.chain.refused(&cheater, json!({"claim": {}})), too_early);
    let report = net.chain.report(0);
    let slashed = HOST_BOND / 2;
    assert_eq!(
        (
            row(&report, "hosts", &cheater)["outcome"].as_str(),
            amount(&row(&report, "hosts", &cheater)["slashed"])
        ),
        (Some("invalid"), slashed)
    );
    let member = net.chain.query(json!({"member": {"address": cheater}}));
    assert_eq!(
        member["unbonding"],
        json!([{"amount": (HOST_BOND - slashed).to_string(), "release_epoch": 1}])
    );
    // The epoch closes; only what the slash left is claimable.
    let theta = digest("theta 1");
    net.propose(&h[1], &theta);
    net.propose(&h[2], &theta);
    assert_eq!(net.epoch_number(), 1);
    net.chain.ok(&cheater, json!({"claim": {}}));
    assert_eq!(net.chain.paid[&cheater], HOST_BOND - slashed);
}

// -- a Δ that no holder serves: exclusions in proposals (`docs/network.md`) -------------------

/// A proposal of `model` by `host` that excludes `excluded` (sent as given).
fn propose_excluding(net: &Net, model: &str, excluded: &[String]) -> Value {
    json!({"propose_model": {"epoch": net.epoch_number(), "model_hash": model,
                             "val_loss_micro": 1_900_000, "excluded": excluded}})
}

/// 4 hosts and 4 validators (r = 2), every verdict honest, up to `propose`; then `proposals`
/// (host index, model label, excluded host indices) in order, until the phase closes (an agreed
/// hash closes it at once). Returns the net and epoch 0's report with the final accounts.
fn propose_with_exclusions(
    settle_page: Option<u32>,
    proposals: &[(usize, &str, &[usize])],
) -> (Net, Settled) {
    let mut net = Net::with_page(&spec_with(json!({})), 4, 4, settle_page);
    net.play_to_verify();
    net.play_verdicts(&honest);
    net.settle();
    assert_eq!(net.phase(), "propose");
    let h = net.hosts.clone();
    for (i, model, excluded) in proposals {
        if net.epoch_number() != 0 {
            break;
        }
        let mut excluded: Vec<String> = excluded.iter().map(|j| h[*j].clone()).collect();
        excluded.sort();
        let msg = propose_excluding(&net, &digest(model), &excluded);
        net.chain.ok(&h[*i], msg);
    }
    if net.epoch_number() == 0 {
        net.chain.wait_past_deadline();
        net.chain.ok(&h[0], json!({"advance": {}}));
    }
    let advances = net.settle();
    assert_eq!(net.epoch_number(), 1);
    let mut report = net.chain.report(0);
    for key in ["phase_deadline", "started_at"] {
        report.as_object_mut().unwrap().remove(key);
    }
    let settled = Settled {
        report,
        members: net.chain.query(json!({"members": {"limit": 100}})),
        accounting: net.chain.query(json!({"accounting": {}})),
        paid: net.chain.paid.clone(),
        next: (
            net.chain.epoch()["model_hash"].clone(),
            net.chain.epoch()["prev_seed"].clone(),
        ),
        advances: (0, advances),
    };
    (net, settled)
}

fn bonded(settled: &Settled, address: &str) -> u128 {
    let member = settled.members["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["address"] == address)
        .unwrap();
    amount(&member["bonded"])
}

/// The validators whose vote passed `host`'s last segment (segment 1 of 2).
fn last_segment_passers(report: &Value, host: &str) -> Vec<String> {
    let c = report["challenges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["host"] == host && c["segment"] == 1)
        .unwrap();
    c["votes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["outcome"] == "pass")
        .map(|v| v["validator"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_exclusion_backed_by_the_agreed_majority_slashes_the_withholder_and_its_passers() {
    // h0, h1, h2 (3/4 of the accepted stake) could get h3's Δ from nobody: they aggregate
    // without it and say so; the model they agree on is the next θ.
    let (mut net, s) =
        propose_with_exclusions(None, &[(0, "A", &[3]), (1, "A", &[3]), (2, "A", &[3])]);
    let h = net.hosts.clone();
    assert_eq!(s.next.0, json!(digest("A")));
    let r = &s.report;
    // The counts (0.3.4): four accepted at finalize, one withdrawn by the exclusions stage. An
    // epoch whose stage ran on an older contract (no tally of withdrawals) answers no counts.
    let e = r["epoch"].as_u64().unwrap();
    let query = json!({"epoch": {"epoch": e, "lists": false, "counts": true}});
    assert_eq!(net.chain.query(query.clone())["counts"]["accepted"], 3);
    let mut older = records::load_counts(&net.chain.deps.storage, e).unwrap();
    assert_eq!((older.accepted, older.withdrawn), (4, Some(1)));
    older.withdrawn = None;
    records::COUNTS.save(&mut net.chain.deps.storage, e, &older);
    assert_eq!(net.chain.query(query)["counts"], Value::Null);
    let withholder = row(r, "hosts", &h[3]);
    assert_eq!(withholder["outcome"], "unavailable");
    assert_eq!(withholder["reward"], "0");
    // Slashed the unavailable share of what it held after giving back the reward it was paid
    // at finalize: its net gain from the epoch is nothing, its loss the slash.
    let slashed = amount(&withholder["slashed"]);
    let reward_paid = s.paid[&h[3]];
    assert!(slashed > 0 && reward_paid > 0);
    let stake = amount(&withholder["stake"]);
    assert_eq!(bonded(&s, &h[3]), stake - reward_paid - slashed);
    assert_eq!(slashed, (stake - reward_paid) / 2); // slash_unavailable_bps = 5000 in the vector
    let passers = last_segment_passers(r, &h[3]);
    assert_eq!(passers.len(), 2);
    for v in net.validators.iter() {
        let vr = row(r, "validators", v);
        if passers.contains(v) {
            assert_eq!(vr["outcome"], "wrong");
            assert_eq!(vr["reward"], "0");
            let paid = s.paid.get(v).copied().unwrap_or(0);
            let stake = amount(&vr["stake"]);
            assert_eq!(bonded(&s, v), stake - paid - amount(&vr["slashed"]));
            assert!(amount(&vr["slashed"]) > 0);
        } else {
            assert_eq!(vr["slashed"], "0");
        }
    }
    for host in &h[..3] {
        let hr = row(r, "hosts", host);
        assert_eq!(
            (hr["outcome"].as_str(), hr["slashed"].as_str()),
            (Some("accepted"), Some("0"))
        );
        assert!(amount(&hr["reward"]) > 0);
        assert_eq!(hr["proposal"]["excluded"], json!([h[3]]));
    }
    // What was taken back is in the reward pool; the slashes went to the treasury.
    let over_members = |field: &str| -> u128 {
        r["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .chain(r["validators"].as_array().unwrap())
            .map(|x| amount(&x[field]))
            .sum()
    };
    let total_slashed = over_members("slashed");
    assert_eq!(amount(&r["slashed_total"]), total_slashed);
    assert_eq!(s.paid[&net.chain.treasury], total_slashed);
    let rewards_kept = over_members("reward");
    assert_eq!(amount(&r["rewards_total"]), rewards_kept);
    assert_eq!(amount(&s.accounting["reward_pool"]), REWARD - rewards_kept);
}

#[test]
fn an_exclusion_without_the_majority_does_nothing() {
    // The agreed hash is backed by three of four (the phase closes at once), but only one or
    // two of them say they excluded h3 (a minority cannot get an honest host slashed); an
    // exclusion attached to a hash nobody agreed on does nothing either.
    let cases: [&[(usize, &str, &[usize])]; 3] = [
        &[(0, "A", &[3]), (1, "A", &[]), (2, "A", &[]), (3, "A", &[])],
        &[(0, "A", &[3]), (1, "A", &[3]), (2, "A", &[]), (3, "A", &[])],
        &[(0, "B", &[3]), (1, "A", &[]), (2, "A", &[]), (3, "A", &[])],
    ];
    for proposals in cases {
        let (net, s) = propose_with_exclusions(None, proposals);
        assert_eq!(s.next.0, json!(digest("A")));
        for x in s.report["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .chain(s.report["validators"].as_array().unwrap())
        {
            assert_eq!(x["slashed"], "0", "{x}");
        }
        assert_eq!(
            row(&s.report, "hosts", &net.hosts[3])["outcome"],
            "accepted"
        );
        assert!(s.report["slashed_total"] == "0" && !s.paid.contains_key(&net.chain.treasury));
    }
}

#[test]
fn paged_exclusions_settle_what_the_one_shot_close_settles() {
    // Two withholders excluded by the agreed majority (h5, h6 of 7 hosts, by the five others:
    // 5/7 > 2/3), one exclusion short of the bar (h4, by two of them).
    let spec = spec_with(json!({}));
    let run = |page: Option<u32>| {
        let mut net = Net::with_page(&spec, 7, 4, page);
        net.play_to_verify();
        net.play_verdicts(&honest);
        net.settle();
        let h = net.hosts.clone();
        for i in 0..5 {
            let mut excluded = vec![h[5].clone(), h[6].clone()];
            if i < 2 {
                excluded.push(h[4].clone());
            }
            excluded.sort();
            let msg = propose_excluding(&net, &digest("A"), &excluded);
            net.chain.ok(&h[i], msg);
        }
        let advances = net.settle();
        assert_eq!(net.epoch_number(), 1);
        let mut report = net.chain.report(0);
        for key in ["phase_deadline", "started_at"] {
            report.as_object_mut().unwrap().remove(key);
        }
        let outcomes: Vec<String> = h
            .iter()
            .map(|x| {
                row(&report, "hosts", x)["outcome"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        (
            report,
            net.chain.query(json!({"members": {"limit": 100}})),
            net.chain.query(json!({"accounting": {}})),
            net.chain.paid.clone(),
            advances,
            outcomes,
        )
    };
    let one_shot = run(Some(1000));
    assert_eq!(one_shot.4, 0);
    assert_eq!(
        one_shot.5,
        [
            "accepted",
            "accepted",
            "accepted",
            "accepted",
            "accepted",
            "unavailable",
            "unavailable"
        ]
    );
    for page in [1, 2] {
        let paged = run(Some(page));
        assert_eq!(paged.0, one_shot.0, "page {page}");
        assert_eq!(paged.1, one_shot.1, "page {page}");
        assert_eq!(paged.2, one_shot.2, "page {page}");
        assert_eq!(paged.3, one_shot.3, "page {page}");
        if page == 1 {
            // Three excluded hosts, one per transaction, the first in the proposal that closed
            // the phase.
            assert_eq!(paged.4, 2);
        }
    }
}

#[test]
fn bad_exclusions_are_refused_with_the_reason() {
    let mut net = Net::new(&spec_with(json!({})), 3, 4);
    net.play_to_verify();
    net.play_verdicts(&honest);
    net.settle();
    let h = net.hosts.clone();
    let v0 = net.validators[0].clone();
    let mut two = vec![h[1].clone(), h[2].clone()];
    two.sort();
    let reversed: Vec<String> = two.iter().rev().cloned().collect();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (reversed, "distinct and in ascending order"),
        (
            vec![h[1].clone(), h[1].clone()],
            "distinct and in ascending order",
        ),
        (vec![h[0].clone()], "cannot exclude its own"),
        (vec![v0.clone()], "is not an accepted host of epoch 0"),
        (
            vec![net.chain.addr("stranger")],
            "is not an accepted host of epoch 0",
        ),
        (
            vec![h[0].clone(), h[1].clone(), h[2].clone(), v0],
            "only 2 other accepted hosts",
        ),
    ];
    for (excluded, why) in cases {
        let msg = propose_excluding(&net, &digest("A"), &excluded);
        let refusal = net.chain.refused(&h[0], msg);
        assert!(
            refusal.contains("propose_model") && refusal.contains(why),
            "{refusal}"
        );
    }
    // A proposal without the field (an older client) is still taken: it excludes nothing.
    let e = net.epoch_number();
    net.chain.ok(
        &h[0],
        json!({"propose_model": {"epoch": e, "model_hash": digest("A"), "val_loss_micro": 1}}),
    );
}

#[test]
fn a_partial_epoch_is_challenged_among_its_segments_and_paid_by_them() {
    // S = 4. h0 commits all 4 segments, h1 only 2 (a straggler at half speed): both are checked
    // (h1's challenges lie among its 2 segments, its last one always), both accepted, the
    // aggregation inputs carry each Δ's segments, and the hosts' reward is split 4 : 2.
    let spec = spec_with(json!({"train": {"inner_steps": 8, "segment_steps": 2}}));
    let mut net = Net::new(&spec, 2, 3);
    let h = net.hosts.clone();
    for who in net.everyone() {
        net.join(&who);
    }
    for bad in [0, 5] {
        assert_eq!(
            net.chain.refused(&h[1], net.commit_msg(&h[1], bad)),
            format!("commit: segments is {bad}, but the run has 1 to 4 segments per epoch")
        );
    }
    let whole = net.commit_msg(&h[0], 4);
    net.chain.ok(&h[0], whole);
    let partial = net.commit_msg(&h[1], 2);
    net.chain.ok(&h[1], partial);
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "verify");
    let segments_of = |net: &Net, host: &str| -> Vec<u64> {
        let report = net.chain.report(0);
        let mut out: Vec<u64> = report["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["host"] == host)
            .map(|c| c["segment"].as_u64().unwrap())
            .collect();
        out.sort_unstable();
        out
    };
    let (full, short) = (segments_of(&net, &h[0]), segments_of(&net, &h[1]));
    assert_eq!(
        full.last(),
        Some(&3),
        "the last of S segments is always challenged"
    );
    assert_eq!(
        short.last(),
        Some(&1),
        "a partial epoch's last segment is its own"
    );
    assert!(
        short.iter().all(|g| *g < 2),
        "challenges outside the 2 committed: {short:?}"
    );
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    for host in h.iter() {
        let r = row(&report, "hosts", host);
        assert_eq!(
            (r["outcome"].as_str(), amount(&r["slashed"])),
            (Some("accepted"), 0)
        );
    }
    let inputs = net.chain.query(json!({"aggregation_inputs": {"epoch": 0}}));
    let segments: BTreeMap<String, u64> = inputs["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["address"].as_str().unwrap().to_string(),
                i["segments"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!((segments[&h[0]], segments[&h[1]]), (4, 2));
    // 80 % of the 1,000,000 to the hosts, by segments: 4/6 and 2/6.
    assert_eq!(amount(&row(&report, "hosts", &h[0])["reward"]), 533_333);
    assert_eq!(amount(&row(&report, "hosts", &h[1])["reward"]), 266_666);
    net.chain.check_books();
}

// -- pipelined epochs: two in flight (`docs/contract.md`, "Pipelined epochs") -----------------

fn pipelined_spec() -> String {
    spec_with(json!({"phases": {"pipelined": true}, "economics": {"unbonding_epochs": 1}}))
}

impl Net {
    /// Every committed host of the epoch the moves go to proposes `start` for the next epoch;
    /// returns the last response.
    fn propose_start_all(&mut self, start: &str) -> Response {
        let hosts = self.hosts.clone();
        self.propose_start_by(&hosts, start)
    }

    /// `hosts` (committed hosts of the epoch the moves go to) propose `start` for the next
    /// epoch, in order; returns the last response.
    fn propose_start_by(&mut self, hosts: &[String], start: &str) -> Response {
        let e = self.epoch_number();
        let mut last = None;
        for h in hosts {
            let msg = json!({"propose_start": {"epoch": e, "model_hash": start}});
            last = Some(self.chain.ok(h, msg));
        }
        last.unwrap()
    }
}

#[test]
fn a_synchronous_run_refuses_a_start_vote_and_keeps_its_spec_text() {
    let spec = spec_with(json!({}));
    assert!(!spec.contains("pipelined"));
    let mut net = Net::new(&spec, 2, 2);
    net.play_to_verify();
    let h = net.hosts[0].clone();
    let msg = json!({"propose_start": {"epoch": 0, "model_hash": digest("opt")}});
    assert_eq!(
        net.chain.refused(&h, msg),
        "propose_start: the run is not pipelined (phases.pipelined is false)"
    );
}

#[test]
fn a_cheater_caught_in_e_after_e_plus_1_started_is_slashed_and_e_plus_2_waits_for_it() {
    let mut net = Net::new(&pipelined_spec(), 3, 2);
    let h = net.hosts.clone();
    let cheater = h[2].clone();
    let cheats = |_: &str, host: &str, _: u64| Some(if host == h[2] { "fail" } else { "pass" });
    // Epoch 0 trains; the start vote waits for its reveal to close.
    for who in net.everyone() {
        net.join(&who);
    }
    for host in h.iter() {
        net.commit(host);
    }
    let early = json!({"propose_start": {"epoch": 0, "model_hash": digest("opt 1")}});
    assert_eq!(
        net.chain.refused(&h[0], early),
        "propose_start: epoch 0 is in reveal: the start vote opens when reveal has closed"
    );
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "verify");
    // The cheater unbonds everything before epoch 1 opens: the stake stays slashable by epoch 0.
    net.chain.ok(
        &cheater,
        json!({"unbond": {"amount": HOST_BOND.to_string()}}),
    );
    let seed_0 = net.chain.epoch()["seed"].as_str().unwrap().to_string();
    // Two of three equal stakes are not more than 2/3: the third proposal opens epoch 1.
    let opened = net.propose_start_all(&digest("opt 1"));
    let pipeline = &events(&opened, "pipeline")[0];
    assert_eq!((pipeline["settling"], pipeline["training"]), ("0", "1"));
    let e1 = net.chain.epoch();
    assert_eq!(
        (
            e1["epoch"].as_u64(),
            e1["phase"].as_str(),
            e1["settling"].as_u64()
        ),
        (Some(1), Some("join"), Some(0))
    );
    assert_eq!(e1["model_hash"].as_str(), Some(digest("opt 1").as_str()));
    assert_eq!(e1["prev_seed"].as_str(), Some(seed_0.as_str()));
    let e0 = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(e0["phase"], "verify");
    assert_eq!(
        e0["start_model_hash"].as_str(),
        Some(digest("opt 1").as_str())
    );
    // The cheater's release epoch (1) is current, but epoch 0 has not settled: no claim.
    assert_eq!(
        net.chain.refused(&cheater, json!({"claim": {}})),
        "claim: nothing to claim at epoch 0; the next release is at epoch 1"
    );
    // Epoch 1 joins and trains while epoch 0's first verdicts are committed.
    for who in net.everyone() {
        if who != cheater {
            net.join(&who);
        }
    }
    net.focus = Some(0);
    net.commit_round(&cheats);
    assert_eq!(net.phase(), "objection");
    net.focus = None;
    // Everyone eligible joined (the cheater, unbonded, is not): epoch 1 trains.
    assert_eq!(net.phase(), "train");
    for host in h.iter().take(2) {
        net.commit(host);
    }
    assert_eq!(net.phase(), "reveal");
    // Epoch 0's objection, verdict_reveal, dispute rounds and finalize run while 1 reveals.
    net.focus = Some(0);
    net.play_verdicts(&cheats);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &cheater)["outcome"], "invalid");
    let slashed = HOST_BOND / 2;
    assert_eq!(amount(&row(&report, "hosts", &cheater)["slashed"]), slashed);
    let member = net.chain.query(json!({"member": {"address": cheater}}));
    assert_eq!(
        member["unbonding"],
        json!([{"amount": (HOST_BOND - slashed).to_string(), "release_epoch": 1}])
    );
    for host in h.iter().take(2) {
        assert_eq!(row(&report, "hosts", host)["outcome"], "accepted");
        assert!(amount(&row(&report, "hosts", host)["reward"]) > 0);
    }
    net.focus = None;
    for who in net.everyone() {
        if who != cheater {
            net.reveal(&who);
        }
    }
    // Epoch 1's reveal close (its weights) and its start vote for epoch 2 wait for epoch 0.
    net.settle();
    assert_eq!(net.phase(), "reveal");
    assert_eq!(
        net.chain.refused(&h[0], json!({"advance": {}})),
        "advance: nothing is due: epoch 1 is in phase reveal, held until epoch 0 settles"
    );
    let msg = json!({"propose_start": {"epoch": 1, "model_hash": digest("opt 2")}});
    assert_eq!(
        net.chain.refused(&h[0], msg.clone()),
        "propose_start: epoch 1 is in reveal: the start vote opens when reveal has closed"
    );
    // Epoch 0 settles on the accepted Δs (the cheater's left out): θ^s_1.
    net.focus = Some(0);
    net.propose(&h[0], &digest("settled 1"));
    let closed = net.propose(&h[1], &digest("settled 1"));
    assert_eq!(
        attr(&closed, "epoch", "next_model_hash"),
        Some(digest("settled 1").as_str())
    );
    net.focus = None;
    let e1 = net.chain.epoch();
    assert_eq!(
        (e1["epoch"].as_u64(), e1["settling"].as_u64()),
        (Some(1), None),
        "closing the settling epoch opens nothing"
    );
    assert_eq!(
        e1["settled_start"].as_str(),
        Some(digest("settled 1").as_str())
    );
    net.settle();
    assert_eq!(
        net.phase(),
        "verify",
        "epoch 1's reveal closed with epoch 0"
    );
    // Only what the slash left is claimable, now that epoch 0 settled.
    net.chain.ok(&cheater, json!({"claim": {}}));
    assert_eq!(net.chain.paid[&cheater], HOST_BOND - slashed);
    // Epoch 2's start (built on θ^s_1) is voted by epoch 1's committed hosts.
    net.chain.ok(&h[0], msg);
    let opened = net.chain.ok(
        &h[1],
        json!({"propose_start": {"epoch": 1, "model_hash": digest("opt 2")}}),
    );
    assert_eq!(events(&opened, "pipeline")[0]["training"], "2");
    assert_eq!(
        net.chain.epoch()["model_hash"].as_str(),
        Some(digest("opt 2").as_str())
    );
    let e1 = net.chain.query(json!({"epoch": {"epoch": 1}}));
    assert_eq!(
        e1["start_model_hash"].as_str(),
        Some(digest("opt 2").as_str())
    );
}

/// 2 hosts and 2 validators, pipelined with a long `verify` (500 blocks): epoch 0 played to
/// `verify`, where it waits, and epoch 1 opened by the start vote (`opt 1`).
fn pipelined_with_epoch_0_waiting_in_verify() -> Net {
    let spec = spec_with(json!({"phases": {"pipelined": true, "verify_blocks": 500}}));
    let mut net = Net::new(&spec, 2, 2);
    net.play_to_verify();
    net.propose_start_all(&digest("opt 1"));
    net
}

#[test]
fn a_pipelined_epochs_reveal_closes_only_after_its_predecessor_settled() {
    // A long `verify`: epoch 0 waits in it, unplayed, while epoch 1 trains and reveals.
    let mut net = pipelined_with_epoch_0_waiting_in_verify();
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    for host in h.clone() {
        net.commit(&host);
    }
    // Everyone but one validator reveals: the reveal would close (complete or due), but its
    // close fixes epoch 1's weights, so it waits for every slash of epoch 0.
    for who in net.everyone() {
        if who != v[1] {
            net.reveal(&who);
        }
    }
    net.chain.wait_past_deadline();
    assert_eq!(
        net.chain.refused(&h[0], json!({"advance": {}})),
        "advance: nothing is due: epoch 1 is in phase reveal, held until epoch 0 settles"
    );
    assert_eq!((net.epoch_number(), net.phase().as_str()), (1, "reveal"));
    // The window is over: the late reveal is refused, though the phase is still open.
    let deadline = net.info()["phase_deadline"].as_u64().unwrap();
    let late = json!({"reveal": {"epoch": 1, "secret": hex(&secret(&v[1]))}});
    assert_eq!(
        net.chain.refused(&v[1], late),
        format!(
            "reveal: the reveal window of epoch 1 closed at height {deadline} (its close waits \
             for the older epoch to settle)"
        )
    );
    // Epoch 0 settles without an agreed model: epoch 1's reveal closes in the same
    // transaction, not reopened (no new window), and the late validator is `no_reveal`.
    net.focus = Some(0);
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let deadline = net.info()["phase_deadline"].as_u64().unwrap();
    net.chain.wait_until(deadline);
    let closed = net.chain.ok(&h[0], json!({"advance": {}}));
    assert_eq!(attr(&closed, "epoch", "agreed"), Some("false"));
    assert!(
        !events(&closed, "phase")
            .iter()
            .any(|p| p["epoch"] == "1" && p["phase"] == "reveal"),
        "a held reveal gets no new window"
    );
    net.focus = None;
    net.settle();
    assert_eq!((net.epoch_number(), net.phase().as_str()), (1, "verify"));
    let report_1 = net.chain.report(1);
    assert_eq!(row(&report_1, "validators", &v[1])["outcome"], "no_reveal");
    assert_eq!(row(&report_1, "validators", &v[0])["revealed"], true);
    net.chain.check_books();
}

#[test]
fn a_pipelined_join_short_of_its_minimums_waits_for_the_settling_epoch_then_gets_its_window() {
    // A long `verify`: epoch 0 waits in it while epoch 1's join runs past its deadline.
    let mut net = pipelined_with_epoch_0_waiting_in_verify();
    let h = net.hosts.clone();
    // Nobody joins epoch 1: past its deadline it is neither extended nor abandoned.
    net.chain.wait_past_deadline();
    assert_eq!(
        net.chain.refused(&h[0], json!({"advance": {}})),
        "advance: nothing is due: epoch 1 is in phase join, held until epoch 0 settles"
    );
    assert_eq!(net.phase(), "join");
    // Epoch 0 settles: epoch 1's join gets a whole window from that block, then is extended.
    net.focus = Some(0);
    net.play_verdicts(&honest);
    net.propose(&h[0], &digest("settled 1"));
    let closed = net.propose(&h[1], &digest("settled 1"));
    let reopened = events(&closed, "phase");
    let join = reopened.iter().find(|p| p["epoch"] == "1").unwrap();
    assert_eq!((join["phase"], join["after_settled"]), ("join", "0"));
    assert_eq!(
        join["deadline"],
        (net.chain.height + 50).to_string().as_str()
    );
    net.focus = None;
    assert_eq!(net.phase(), "join");
    net.chain.wait_past_deadline();
    let extended = net.chain.ok(&h[0], json!({"advance": {}}));
    assert_eq!(attr(&extended, "phase", "extensions"), Some("1"));
}

// -- sitting out an epoch (issue 30: a host that finishes no segment) ------------------------

impl Net {
    fn sit_out(&mut self, host: &str) -> Response {
        let e = self.epoch_number();
        self.chain.ok(host, json!({"sit_out": {"epoch": e}}))
    }
}

#[test]
fn a_host_that_sits_out_is_not_checked_paid_or_slashed_and_rejoins_the_next_epoch() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in net.everyone() {
        net.join(&who);
    }
    let during_train = net.chain.report(0);
    assert!(
        during_train["challenges"].as_array().unwrap().is_empty(),
        "no pick is known while a host can still sit out"
    );
    net.commit(&h[0]);
    net.commit(&h[1]);
    let response = net.sit_out(&h[2]);
    assert!(response
        .attributes
        .iter()
        .any(|a| a.key == "outcome" && a.value == "sat_out"));
    // The train phase waits for a sit-out no more than for a commitment: it closes now.
    assert_eq!(net.phase(), "reveal");
    let status = net.status_of(&h[2]);
    assert_eq!(
        (status["committed"].as_bool(), status["outcome"].as_str()),
        (Some(false), Some("sat_out"))
    );
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "verify");
    // Not challenged: no validator sits on it, and it owes no trap opening.
    for validator in v.iter() {
        assert!(net.challenges(validator).iter().all(|c| c["host"] != h[2]));
    }
    assert_eq!(net.status_of(&h[2])["challenged"], false);
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    let sat = row(&report, "hosts", &h[2]);
    assert_eq!(
        (
            sat["outcome"].as_str(),
            amount(&sat["slashed"]),
            amount(&sat["reward"])
        ),
        (Some("sat_out"), 0, 0)
    );
    // The two that trained share the hosts' 80 % of the reward.
    for host in h.iter().take(2) {
        assert_eq!(amount(&row(&report, "hosts", host)["reward"]), 400_000);
    }
    assert_eq!(report["slashed_total"], "0");
    // No model vote either: only accepted hosts propose.
    let msg =
        json!({"propose_model": {"epoch": 0, "model_hash": digest("m"), "val_loss_micro": 1}});
    assert!(net
        .chain
        .refused(&h[2], msg)
        .contains("not an accepted host"));
    net.propose(&h[0], &digest("m"));
    net.propose(&h[1], &digest("m"));
    assert_eq!(net.epoch_number(), 1);
    // It joins the next epoch with its whole stake and trains it like anyone else.
    let member = net.chain.query(json!({"member": {"address": h[2]}}));
    assert_eq!(amount(&member["bonded"]), HOST_BOND);
    net.play_to_verify();
    net.play_verdicts(&honest);
    let report = net.chain.report(1);
    for host in h.iter() {
        assert_eq!(row(&report, "hosts", host)["outcome"], "accepted");
    }
    net.chain.check_books();
}

#[test]
fn sit_out_is_refused_after_a_commit_twice_from_outsiders_and_outside_its_window() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let outsider = net.chain.addr("outsider");
    let msg = |e: u64| json!({"sit_out": {"epoch": e}});
    for who in net.everyone() {
        net.join(&who);
    }
    assert_eq!(net.phase(), "train");
    net.commit(&h[0]);
    assert_eq!(
        net.chain.refused(&h[0], msg(0)),
        format!(
            "sit_out: {} already committed in epoch 0; a committed host cannot sit out",
            h[0]
        )
    );
    net.sit_out(&h[1]);
    assert_eq!(
        net.chain.refused(&h[1], msg(0)),
        format!("sit_out: {} already sat out epoch 0", h[1])
    );
    // Having sat out, it cannot change its mind and commit.
    let commit = net.commit_msg(&h[1], 2);
    assert_eq!(
        net.chain.refused(&h[1], commit),
        format!("commit: {} sat out epoch 0; it commits in the next", h[1])
    );
    assert_eq!(
        net.chain.refused(&outsider, msg(0)),
        format!("sit_out: {outsider} did not join epoch 0")
    );
    assert!(net
        .chain
        .refused(&v[0], msg(0))
        .starts_with(&format!("sit_out: {} ", v[0])));
    assert_eq!(
        net.chain.refused(&h[2], msg(1)),
        "sit_out: epoch 1 has not started; the current epoch is 0"
    );
    let paid = json!({"sit_out": {"epoch": 0}});
    assert!(
        net.chain.execute(&h[2], paid, 5).is_err(),
        "funds are refused"
    );
    // Once reveals may be public (the picks follow from them), sitting out is over.
    net.commit(&h[2]);
    assert_eq!(net.phase(), "reveal");
    assert_eq!(
        net.chain.refused(&h[2], msg(0)),
        "sit_out: epoch 0 is in phase reveal; sit_out is accepted in phase train only"
    );
}

#[test]
fn a_sat_out_host_that_withholds_its_reveal_pays_the_no_reveal_slash() {
    // Sitting out must not make a withheld reveal (a say in the next seed, so in the next
    // epoch's data and pickers) free.
    let mut net = Net::new(&spec_with(json!({})), 2, 2);
    let h = net.hosts.clone();
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    net.sit_out(&h[1]);
    for who in net.everyone() {
        if who != h[1] {
            net.reveal(&who);
        }
    }
    assert_eq!(
        net.phase(),
        "reveal",
        "reveal waits for the sat-out host's secret"
    );
    net.chain.wait_past_deadline();
    let first = net.hosts[0].clone();
    net.chain.ok(&first, json!({"advance": {}}));
    net.settle();
    assert_eq!(net.phase(), "verify");
    net.play_verdicts(&honest);
    let report = net.chain.report(0);
    let r = row(&report, "hosts", &h[1]);
    assert_eq!(r["outcome"], "no_reveal");
    assert_eq!(amount(&r["slashed"]), HOST_BOND / 2);
    net.chain.check_books();
}

#[test]
fn sitting_out_e_plus_1_neither_shields_a_slash_earned_in_e_nor_votes_on_the_start() {
    let mut net = Net::new(&pipelined_spec(), 3, 2);
    let h = net.hosts.clone();
    let cheater = h[2].clone();
    let cheats = |_: &str, host: &str, _: u64| Some(if host == h[2] { "fail" } else { "pass" });
    net.play_to_verify();
    net.propose_start_all(&digest("opt 1"));
    assert_eq!(net.chain.epoch()["epoch"], 1);
    // Epoch 1: everyone joins; the cheater, caught in epoch 0, sits out epoch 1.
    for who in net.everyone() {
        net.join(&who);
    }
    net.focus = Some(0);
    net.commit_round(&cheats);
    net.focus = None;
    assert_eq!(net.phase(), "train");
    net.commit(&h[0]);
    net.commit(&h[1]);
    net.sit_out(&cheater);
    assert_eq!(net.phase(), "reveal");
    net.focus = Some(0);
    net.play_verdicts(&cheats);
    let report = net.chain.report(0);
    let r = row(&report, "hosts", &cheater);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("invalid"), HOST_BOND / 2),
        "epoch 0's slash is epoch 0's, whatever it does in epoch 1"
    );
    net.propose(&h[0], &digest("settled 1"));
    net.propose(&h[1], &digest("settled 1"));
    net.focus = None;
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
    assert_eq!(net.phase(), "verify");
    // The start vote of epoch 2 weighs the committed hosts only: the sat-out host has none,
    // and the two that committed carry it alone.
    let msg = json!({"propose_start": {"epoch": 1, "model_hash": digest("opt 2")}});
    assert_eq!(
        net.chain.refused(&cheater, msg.clone()),
        format!("propose_start: {cheater} is not a committed host of epoch 1")
    );
    net.chain.ok(&h[0], msg.clone());
    let opened = net.chain.ok(&h[1], msg);
    assert_eq!(events(&opened, "pipeline")[0]["training"], "2");
    net.focus = Some(1);
    net.play_verdicts(&honest);
    let report = net.chain.report(1);
    let r = row(&report, "hosts", &cheater);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("sat_out"), 0)
    );
    net.focus = None;
    net.chain.check_books();
}

// -- a host ranks for a seat by its misses of the last W epochs (issue 30) --------------------

impl Net {
    /// Two host seats; host-0 bonds 30 M, host-1 20 M, host-2 10 M (stake orders the seats).
    fn two_seats_three_stakes() -> Net {
        Net::two_seats_three_stakes_with(json!({}))
    }

    /// The same, with `changes` to the spec.
    fn two_seats_three_stakes_with(changes: Value) -> Net {
        let mut spec: Value = serde_json::from_str(&spec_with(changes)).unwrap();
        spec["phases"]["max_hosts"] = json!(2);
        let mut net = Net::new(&serde_json::to_string(&spec).unwrap(), 3, 2);
        for (host, extra) in [(0, 2 * HOST_BOND), (1, HOST_BOND)] {
            let h = net.hosts[host].clone();
            let bond =
                json!({"bond": {"role": "host", "endpoint": format!("http://host-{host}:8700")}});
            net.chain.pay(&h, bond, extra);
        }
        net
    }

    /// Join-refusal text for `host`, which missed `misses` of the last `window` epochs (the
    /// last: `last`) and finds only hosts that missed fewer.
    fn ranks_last(&self, host: &str, misses: u32, window: u64, last: u64) -> String {
        format!(
            "join: epoch {} is full and {host} missed {misses} of the last {window} epochs (the \
             last: epoch {last}): a host ranks below every host that missed fewer",
            self.epoch_number()
        )
    }

    /// Close a join that runs to its deadline (more hosts are eligible than the seats).
    fn close_join(&mut self) {
        self.chain.wait_past_deadline();
        let first = self.hosts[0].clone();
        self.chain.ok(&first, json!({"advance": {}}));
        assert_eq!(self.phase(), "train");
    }

    /// Reveal with everyone that joined, then settle, verify honestly and propose one model.
    fn finish_epoch(&mut self, joined: &[String]) {
        for who in joined {
            self.reveal(who);
        }
        self.settle();
        self.play_verdicts(&honest);
        let e = self.epoch_number();
        for host in self.hosts.clone() {
            let accepted = self.chain.report(e)["hosts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["address"] == host && r["outcome"] == "accepted");
            if accepted && self.epoch_number() == e {
                self.propose(&host, &digest("m"));
            }
        }
        assert_eq!(self.epoch_number(), e + 1, "epoch {e} closed");
    }

    /// Try to join; whether the contract took it.
    fn try_join(&mut self, who: &str) -> bool {
        let e = self.epoch_number();
        let commit = hex(&beacon::commitment(who, e, &secret(who)));
        let msg = json!({"join": {"epoch": e, "beacon_commit": commit}});
        self.chain.execute(who, msg, 0).is_ok()
    }

    /// The hosts that joined the epoch the moves go to.
    fn joined_hosts(&self) -> Vec<String> {
        self.info()["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    }
}

fn evicted(response: &Response) -> Option<&str> {
    response
        .attributes
        .iter()
        .find(|a| a.key == "evicted")
        .map(|a| a.value.as_str())
}

#[test]
fn a_host_that_sat_out_cannot_evict_and_a_smaller_stake_evicts_it_until_the_miss_leaves_w() {
    // W = 1: only the epoch before counts (the rule of the build that ranked sit-outs only).
    let mut net = Net::two_seats_three_stakes_with(json!({"economics": {"miss_window_epochs": 1}}));
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.join(&h[0]);
    net.join(&h[1]);
    // Full: host-2's 10 M does not out-stake the smallest seat (20 M).
    assert!(net
        .chain
        .refused(
            &h[2],
            json!({"join": {"epoch": 0, "beacon_commit": digest("b")}})
        )
        .contains("is full: its 2 host seats are held by stakes of at least 20000000inj"));
    for who in v.iter() {
        net.join(who);
    }
    net.close_join();
    // The largest stake holds a seat and sits out; host-1 trains.
    net.sit_out(&h[0]);
    net.commit(&h[1]);
    net.finish_epoch(&[h[0].clone(), h[1].clone(), v[0].clone(), v[1].clone()]);

    // Epoch 1: host-0 (30 M, sat out epoch 0) holds a seat only while nobody else wants it.
    net.join(&h[0]);
    net.join(&h[1]);
    let response = net.join(&h[2]);
    assert_eq!(
        evicted(&response),
        Some(h[0].as_str()),
        "a 10 M newcomer evicts the 30 M host that sat out"
    );
    let again = json!({"join": {"epoch": 1, "beacon_commit": digest("b")}});
    assert_eq!(
        net.chain.refused(&h[0], again),
        net.ranks_last(&h[0], 1, 1, 0)
    );
    // Its stake is untouched: it is only ordered last.
    let member = net.chain.query(json!({"member": {"address": h[0]}}));
    assert_eq!(amount(&member["bonded"]), 3 * HOST_BOND);
    for who in v.iter() {
        net.join(who);
    }
    net.close_join();
    net.commit(&h[1]);
    net.commit(&h[2]);
    net.finish_epoch(&[h[1].clone(), h[2].clone(), v[0].clone(), v[1].clone()]);

    // Epoch 2: epoch 0 is out of the window of 1; host-0 out-stakes the smallest seat again.
    net.join(&h[1]);
    net.join(&h[2]);
    let response = net.join(&h[0]);
    assert_eq!(evicted(&response), Some(h[2].as_str()));
    let status = net.status_of(&h[0]);
    assert_eq!(amount(&status["stake"]), 3 * HOST_BOND, "{status}");
    net.chain.check_books();
}

/// Epochs 0..8 where host-0 (30 M) sits out every epoch it holds a seat and host-1 (20 M) and
/// host-2 (10 M) train whenever they hold one; returns the epochs host-2 held a seat in.
fn seats_of_the_smallest_trainer(window: u64) -> Vec<u64> {
    let mut net =
        Net::two_seats_three_stakes_with(json!({"economics": {"miss_window_epochs": window}}));
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let mut seated = Vec::new();
    for e in 0..8u64 {
        net.join(&h[1]);
        net.join(&h[2]);
        let sitter_in = net.try_join(&h[0]);
        for who in v.iter() {
            net.join(who);
        }
        net.close_join();
        let hosts = net.joined_hosts();
        assert_eq!(sitter_in, hosts.contains(&h[0]), "epoch {e}");
        if hosts.contains(&h[2]) {
            seated.push(e);
        }
        for host in hosts.iter() {
            if *host == h[0] {
                net.sit_out(host);
            } else {
                net.commit(host);
            }
        }
        let mut joined = hosts.clone();
        joined.extend(v.iter().cloned());
        net.finish_epoch(&joined);
    }
    // It lost nothing but its seats and rewards.
    let member = net.chain.query(json!({"member": {"address": h[0]}}));
    assert_eq!(amount(&member["bonded"]), 3 * HOST_BOND);
    net.chain.check_books();
    seated
}

#[test]
fn a_host_that_sits_out_whenever_it_holds_a_seat_stays_behind_a_smaller_host_that_trains() {
    // With W = 1 the sitter is back every other epoch and keeps the 10 M host out of half of
    // them; with W = 3 it ranks last for the 3 epochs after each sit-out.
    assert_eq!(seats_of_the_smallest_trainer(1), vec![1, 3, 5, 7]);
    assert_eq!(seats_of_the_smallest_trainer(3), vec![1, 2, 3, 5, 6, 7]);
}

/// `Net::two_seats_three_stakes` through epoch 0, in which host-0 (30 M) and host-1 (20 M) both
/// sit out (nobody trains: nothing to check or accept, and the epoch closes), and into epoch 1's
/// join, where host-2 (10 M, which did not sit out) outranks either and, among those that sat
/// out, host-0 evicts host-1 (the larger stake keeps the seat), which then cannot join again.
fn two_sat_out_and_the_larger_stake_keeps_the_seat() -> Net {
    let mut net = Net::two_seats_three_stakes();
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    for who in [&h[0], &h[1], &v[0], &v[1]] {
        net.join(who);
    }
    net.close_join();
    net.sit_out(&h[0]);
    net.sit_out(&h[1]);
    for who in [&h[0], &h[1], &v[0], &v[1]] {
        net.reveal(who);
    }
    net.settle();
    // Nobody trained: nothing to check or accept, and the epoch closes.
    net.chain.wait_past_deadline();
    net.chain.ok(&h[2], json!({"advance": {}}));
    net.settle();
    assert_eq!(net.epoch_number(), 1);
    // Epoch 1: both sat out; host-2 (10 M) did not, so it outranks either.
    net.join(&h[1]);
    net.join(&h[2]);
    let response = net.join(&h[0]);
    assert_eq!(
        evicted(&response),
        Some(h[1].as_str()),
        "30 M evicts 20 M among those that sat out"
    );
    let again = json!({"join": {"epoch": 1, "beacon_commit": digest("b")}});
    assert_eq!(
        net.chain.refused(&h[1], again),
        format!(
            "join: epoch 1 is full and {} missed 1 of the last 8 epochs (the last: epoch 0): it \
             ranks below every host that missed fewer, and the smallest seat of a host that \
             missed as many holds 30000000inj",
            h[1]
        )
    );
    net
}

#[test]
fn a_host_that_missed_more_of_the_window_ranks_below_one_that_missed_fewer() {
    // Epoch 0: host-0 (30 M) and host-1 (20 M) both sit out. Epoch 1: one miss each; among them
    // the larger stake ranks first. host-0 sits out again.
    let mut net = two_sat_out_and_the_larger_stake_keeps_the_seat();
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let validators = || v.clone();
    for who in validators() {
        net.join(&who);
    }
    net.close_join();
    net.sit_out(&h[0]);
    net.commit(&h[2]);
    let mut joined = vec![h[0].clone(), h[2].clone()];
    joined.extend(validators());
    net.finish_epoch(&joined);
    // Epoch 2: host-0 missed 2, host-1 1, host-2 none: host-1 (20 M) evicts host-0 (30 M).
    net.join(&h[0]);
    net.join(&h[2]);
    assert_eq!(evicted(&net.join(&h[1])), Some(h[0].as_str()));
    let again = json!({"join": {"epoch": 2, "beacon_commit": digest("b")}});
    assert_eq!(
        net.chain.refused(&h[0], again),
        net.ranks_last(&h[0], 2, 8, 1)
    );
    net.chain.check_books();
}

// -- absences: the first miss in W epochs is excused (issue 30) -------------------------------

/// One epoch of `net` (3 hosts, 2 validators): every member joins, host-0 and host-1 commit,
/// `absent` sends nothing in `train`, `sitter` sits out, and `withholding` does not reveal.
/// Returns the report of `absent`.
fn epoch_with_an_absence(
    net: &mut Net,
    absent: &str,
    sitter: Option<&str>,
    withholding: bool,
) -> Value {
    let e = net.epoch_number();
    for who in net.everyone() {
        net.join(&who);
    }
    for host in net.hosts.clone() {
        if host == absent {
            continue;
        }
        if Some(host.as_str()) == sitter {
            net.sit_out(&host);
        } else {
            net.commit(&host);
        }
    }
    let first = net.hosts[0].clone();
    if net.phase() == "train" {
        net.chain.wait_past_deadline();
        net.chain.ok(&first, json!({"advance": {}}));
    }
    for who in net.everyone() {
        if !(withholding && who == absent) {
            net.reveal(&who);
        }
    }
    if withholding {
        net.chain.wait_past_deadline();
        net.chain.ok(&first, json!({"advance": {}}));
    }
    net.settle();
    net.play_verdicts(&honest);
    for host in net.hosts.clone() {
        let accepted = net.chain.report(e)["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["address"] == host && r["outcome"] == "accepted");
        if accepted && net.epoch_number() == e {
            net.propose(&host, &digest("m"));
        }
    }
    assert_eq!(net.epoch_number(), e + 1);
    let report = net.chain.report(e);
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == absent)
        .cloned()
        .unwrap_or(Value::Null)
}

fn outcome_and_slash(r: &Value) -> (String, u128, u128) {
    (
        r["outcome"].as_str().unwrap().to_string(),
        amount(&r["slashed"]),
        amount(&r["reward"]),
    )
}

#[test]
fn a_host_absent_once_is_not_slashed_and_trains_the_next_epoch() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let h = net.hosts.clone();
    let r = epoch_with_an_absence(&mut net, &h[2], None, false);
    assert_eq!(outcome_and_slash(&r), ("absent_excused".into(), 0, 0));
    // The two that trained share the hosts' whole part, as with a sit-out.
    let report = net.chain.report(0);
    assert_eq!(amount(&row(&report, "hosts", &h[0])["reward"]), 400_000);
    assert_eq!(report["slashed_total"], "0");
    // It joins the next epoch with its whole stake and is accepted like anyone else.
    let member = net.chain.query(json!({"member": {"address": h[2]}}));
    assert_eq!(amount(&member["bonded"]), HOST_BOND);
    net.play_to_verify();
    net.play_verdicts(&honest);
    assert_eq!(
        row(&net.chain.report(1), "hosts", &h[2])["outcome"],
        "accepted"
    );
    net.chain.check_books();
}

#[test]
fn a_host_absent_again_within_w_pays_the_absent_slash_and_after_w_is_excused_again() {
    // W = 2: absent in epoch 0 (excused), 1 (its miss of 0 is in the window: 5 %), then
    // trains in 2 and 3, and is absent in 4: its last miss (1) is 3 epochs back, excused.
    let mut net = Net::new(
        &spec_with(json!({"economics": {"miss_window_epochs": 2}})),
        3,
        2,
    );
    let h = net.hosts.clone();
    let r = epoch_with_an_absence(&mut net, &h[2], None, false);
    assert_eq!(outcome_and_slash(&r), ("absent_excused".into(), 0, 0));
    let r = epoch_with_an_absence(&mut net, &h[2], None, false);
    assert_eq!(
        outcome_and_slash(&r),
        ("absent".into(), HOST_BOND / 20, 0),
        "a second miss within W"
    );
    let absent_outsider = net.chain.addr("nobody");
    for _ in 0..2 {
        let r = epoch_with_an_absence(&mut net, &absent_outsider, None, false);
        assert!(r.is_null(), "everyone trained");
    }
    let r = epoch_with_an_absence(&mut net, &h[2], None, false);
    assert_eq!(outcome_and_slash(&r), ("absent_excused".into(), 0, 0));
    net.chain.check_books();
}

#[test]
fn a_sit_out_counts_as_a_miss_so_an_absence_right_after_it_is_slashed() {
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let h = net.hosts.clone();
    let nobody = net.chain.addr("nobody");
    epoch_with_an_absence(&mut net, &nobody, Some(&h[2]), false);
    let r = epoch_with_an_absence(&mut net, &h[2], None, false);
    assert_eq!(outcome_and_slash(&r), ("absent".into(), HOST_BOND / 20, 0));
    net.chain.check_books();
}

#[test]
fn an_excused_absence_still_pays_for_a_withheld_reveal_and_a_repeated_one_pays_both() {
    // A machine down through `reveal` cannot reveal: excused or not, the no-reveal slash (50 %)
    // is due, or a host could withhold for free and choose between two seeds.
    let mut net = Net::new(&spec_with(json!({})), 3, 2);
    let h = net.hosts.clone();
    let r = epoch_with_an_absence(&mut net, &h[2], None, true);
    assert_eq!(
        outcome_and_slash(&r),
        ("no_reveal".into(), HOST_BOND / 2, 0)
    );
    // Top up to the bond and miss again: absent (5 %) plus no reveal (50 %) of its stake.
    let bond = json!({"bond": {"role": "host", "endpoint": "http://host-2:8700"}});
    net.chain.pay(&h[2], bond, HOST_BOND / 2);
    let r = epoch_with_an_absence(&mut net, &h[2], None, true);
    assert_eq!(
        outcome_and_slash(&r),
        ("absent".into(), HOST_BOND * 55 / 100, 0)
    );
    net.chain.check_books();
}

#[test]
fn among_hosts_that_sat_out_the_larger_stake_keeps_the_seat() {
    let net = two_sat_out_and_the_larger_stake_keeps_the_seat();
    net.chain.check_books();
}

#[test]
fn a_pipelined_next_epoch_opens_only_once_every_absence_of_e_is_on_record() {
    // One record a page: e's seed is fixed while its `assign` stage, which records the absences
    // (and so the misses that rank e + 1's seats), still has pages to run. The start vote that
    // passes meanwhile opens e + 1 only once `assign` is done.
    let mut net = Net::with_page(&pipelined_spec(), 3, 2, Some(1));
    let h = net.hosts.clone();
    for who in net.everyone() {
        net.join(&who);
    }
    net.commit(&h[0]);
    net.commit(&h[1]);
    net.chain.wait_past_deadline();
    net.chain.ok(&h[0], json!({"advance": {}}));
    for who in net.everyone() {
        net.reveal(&who);
    }
    while net.chain.epoch()["seed"].is_null() {
        net.chain.ok(&h[0], json!({"advance": {}}));
    }
    assert_eq!(net.chain.epoch()["closing"], "assign");
    let start = json!({"propose_start": {"epoch": 0, "model_hash": digest("opt 1")}});
    net.chain.ok(&h[0], start.clone());
    net.chain.ok(&h[1], start);
    let epoch = net.chain.epoch();
    assert_eq!(
        (epoch["epoch"].as_u64(), epoch["closing"].as_str()),
        (Some(0), Some("assign")),
        "the start is agreed, but e + 1 waits for e's absences"
    );
    let mut sent = 0;
    while net.chain.epoch()["epoch"] == 0 {
        net.chain.ok(&h[0], json!({"advance": {}}));
        sent += 1;
        assert!(sent < 100, "epoch 1 never opens");
    }
    assert_eq!(
        row(&net.chain.report(0), "hosts", &h[2])["outcome"],
        "absent_excused"
    );
    net.chain.check_books();
}

/// A net of 2 hosts and 4 validators with the probe on (`verification.probe_windows` 2): each
/// verdict on a host's last segment carries the host's probe gain.
fn probe_net() -> Net {
    let net = Net::new(
        &spec_with(json!({"verification": {"probe_windows": 2}})),
        2,
        4,
    );
    assert!(net.probe);
    net
}

/// `msg` (a `reveal_verdict`) with its `gain_micro` set to `gain` (None: the key removed).
fn with_gain(mut msg: Value, gain: Option<Value>) -> Value {
    let body = msg["reveal_verdict"].as_object_mut().unwrap();
    match gain {
        Some(g) => body.insert("gain_micro".into(), g),
        None => body.remove("gain_micro"),
    };
    msg
}

#[test]
fn a_probe_gain_is_required_on_the_last_segment_and_refused_elsewhere() {
    let mut net = probe_net();
    let h = net.hosts.clone();
    net.play_to_verify();
    net.play_round(&honest, &h); // verify
    net.play_round(&honest, &h); // objection
    assert_eq!(net.phase(), "verdict_reveal");
    let seat = first_round(&net.challenge(&h[0], 1))[0].clone();
    let opening = net.opening(&seat, &h[0], 1, "pass");
    let err = net.chain.refused(&seat, with_gain(opening.clone(), None));
    assert!(err.contains("must carry the host's probe gain"), "{err}");
    let too_big = json!(crate::limits::MAX_GAIN_MICRO as i64 + 1);
    let err = net
        .chain
        .refused(&seat, with_gain(opening.clone(), Some(too_big)));
    assert!(
        err.contains("gain_micro must be within ±1000000000000"),
        "{err}"
    );
    let err = net
        .chain
        .refused(&seat, with_gain(opening.clone(), Some(json!("12"))));
    assert!(err.contains("expected i64"), "a gain is an integer: {err}");
    // A segment that is not the host's last carries none.
    let (host, seat0) = h
        .iter()
        .find_map(|x| {
            let report = net.chain.report(0);
            report["challenges"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["host"] == *x && c["segment"] == 0)
                .map(|c| (x.clone(), first_round(c)[0].clone()))
        })
        .expect("some host's segment 0 is challenged");
    let wrong_place = with_gain(net.opening(&seat0, &host, 0, "pass"), Some(json!(5)));
    let err = net.chain.refused(&seat0, wrong_place);
    assert!(
        err.contains("belongs only on a verdict on a host's last segment"),
        "{err}"
    );
    // The right opening is accepted.
    net.chain.ok(&seat, opening);
}

#[test]
fn without_the_probe_a_gain_is_refused_and_an_old_opening_is_accepted() {
    let mut net = Net::new(
        &spec_with(json!({"verification": {"probe_windows": 0}})),
        2,
        4,
    );
    assert!(!net.probe);
    let h = net.hosts.clone();
    net.play_to_verify();
    net.play_round(&honest, &h);
    net.play_round(&honest, &h);
    let seat = first_round(&net.challenge(&h[0], 1))[0].clone();
    let opening = net.opening(&seat, &h[0], 1, "pass");
    assert!(opening["reveal_verdict"].get("gain_micro").is_none());
    let err = net
        .chain
        .refused(&seat, with_gain(opening.clone(), Some(json!(7))));
    assert!(err.contains("probe_windows > 0"), "{err}");
    net.chain.ok(&seat, opening);
}

#[test]
fn equal_gains_agree_and_the_chain_records_the_hosts_gain() {
    let mut net = probe_net();
    let h = net.hosts.clone();
    net.play_to_verify();
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    for c in report["challenges"].as_array().unwrap() {
        assert_eq!(c["outcome"], "pass");
        assert_eq!(
            c["rounds"], 0,
            "equal gains are one verdict: nothing disputed"
        );
        let last = c["segment"] == 1;
        let want = if last {
            json!(HONEST_GAIN)
        } else {
            Value::Null
        };
        assert_eq!(c["gain_micro"], want);
        for vote in c["votes"].as_array().unwrap() {
            assert_eq!(vote["gain_micro"], want);
        }
    }
    for host in h.iter() {
        let r = row(&report, "hosts", host);
        assert_eq!(
            (r["outcome"].as_str(), r["gain_micro"].as_i64()),
            (Some("accepted"), Some(HONEST_GAIN))
        );
    }
    let inputs = net.chain.query(json!({"aggregation_inputs": {"epoch": 0}}));
    let gains: Vec<i64> = inputs["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["gain_micro"].as_i64().unwrap())
        .collect();
    assert_eq!(gains, vec![HONEST_GAIN; 2]);
}

/// `probe_net` with `n` validators of equal stake (6 or 7: 3 round-0 seats on a last segment,
/// drawn until their stake is more than 1/3; the others final voters).
fn probe_net_of(n: usize) -> Net {
    Net::new(
        &spec_with(json!({"verification": {"probe_windows": 2}})),
        2,
        n,
    )
}

/// The report's votes on a challenge: validator -> (round, gain, dispute gain, round-0 gain).
type GainsOf = (u64, Option<i64>, Option<i64>, Option<i64>);
fn votes_of(c: &Value) -> BTreeMap<String, GainsOf> {
    c["votes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["validator"].as_str().unwrap().to_string(),
                (
                    v["round"].as_u64().unwrap(),
                    v["gain_micro"].as_i64(),
                    v["dispute_gain_micro"].as_i64(),
                    v["round0_gain_micro"].as_i64(),
                ),
            )
        })
        .collect()
}

#[test]
fn a_gain_liar_that_re_votes_honestly_is_wrong_and_the_main_gain_decided() {
    let mut net = probe_net();
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.play_to_verify();
    let seats = first_round(&net.challenge(&h[0], 1));
    net.gains.insert(seats[0].clone(), HONEST_GAIN * 3);
    // Every seat passes: nobody objects, the gains differ only in the hidden commitments.
    net.play_round(&honest, &h);
    net.play_round(&honest, &h);
    assert_eq!(net.phase(), "verdict_reveal");
    // A round-0 opening carries no dispute-window gain (its preimage is the older format).
    let mut msg = net.opening(&seats[1], &h[0], 1, "pass");
    msg["reveal_verdict"]["dispute_gain_micro"] = json!(HONEST_DISPUTE_GAIN);
    let err = net.chain.refused(&seats[1], msg);
    assert!(err.contains("dispute_gain_micro belongs only"), "{err}");
    net.play_round(&honest, &h);
    assert_eq!(
        net.phase(),
        "dispute",
        "opened passes with different gains are different verdicts"
    );
    assert_eq!(net.challenge(&h[0], 1)["rounds"], 1);
    // Every member sits on it, and every round-0 seat owes a re-vote (round 2).
    for validator in v.iter() {
        let mine: Vec<Value> = net
            .challenges(validator)
            .into_iter()
            .filter(|c| c["host"] == h[0].as_str() && c["segment"] == 1)
            .collect();
        assert!(mine.iter().all(|c| c["gain_dispute"] == true));
        let due: Vec<u64> = mine
            .iter()
            .filter(|c| c["due"] == true)
            .map(|c| c["round"].as_u64().unwrap())
            .collect();
        let expected = if seats.contains(validator) { 2 } else { 1 };
        assert_eq!(due, vec![expected], "{validator}");
    }
    // Undisputed challenges are not gain disputes: the key is left out of their views.
    let other = net.challenges(&seats[0]);
    assert!(other
        .iter()
        .filter(|c| c["host"] == h[1].as_str())
        .all(|c| c.get("gain_dispute").is_none()));
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    let c = net.challenge(&h[0], 1);
    // The decided gain is the main windows' (every host on one draw); the blind deciding votes
    // carry the dispute windows' too.
    assert_eq!(
        (c["outcome"].as_str(), c["gain_micro"].as_i64()),
        (Some("pass"), Some(HONEST_GAIN))
    );
    let votes = votes_of(&c);
    for seat in seats.iter() {
        let first = if *seat == seats[0] {
            HONEST_GAIN * 3
        } else {
            HONEST_GAIN
        };
        assert_eq!(
            votes[seat],
            (0, Some(HONEST_GAIN), Some(HONEST_DISPUTE_GAIN), Some(first)),
            "its re-vote, with its round-0 opening kept beside it"
        );
    }
    for voter in v.iter().filter(|x| !seats.contains(x)) {
        assert_eq!(
            votes[voter],
            (1, Some(HONEST_GAIN), Some(HONEST_DISPUTE_GAIN), None)
        );
    }
    let r = row(&report, "hosts", &h[0]);
    assert_eq!(
        (
            r["outcome"].as_str(),
            r["gain_micro"].as_i64(),
            amount(&r["slashed"])
        ),
        (Some("accepted"), Some(HONEST_GAIN), 0)
    );
    // The liar's round-0 gain is judged against the decided one: its honest re-vote does not
    // save it (the lie costs); everyone else is with the decision.
    for validator in v.iter() {
        let r = row(&report, "validators", validator);
        if *validator == seats[0] {
            assert_eq!(r["outcome"], "wrong");
            assert!(amount(&r["slashed"]) > 0, "{r}");
        } else {
            assert_eq!(
                (r["outcome"].as_str(), r["slashed"].as_str()),
                (Some("diligent"), Some("0")),
                "{validator}"
            );
        }
    }
    net.chain.check_books();
}

#[test]
fn in_a_gain_dispute_a_copied_gain_is_wrong_and_a_missing_revote_silent() {
    let mut net = probe_net_of(9);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.play_to_verify();
    let seats = first_round(&net.challenge(&h[0], 1));
    // Honest deciders (the seats after the first two, the final voters after the first two)
    // hold more than half of the 9 equal stakes.
    assert_eq!(seats.len(), 4, "{seats:?}");
    let finals: Vec<String> = v.iter().filter(|x| !seats.contains(x)).cloned().collect();
    let (liar, lazy_seat) = (seats[0].clone(), seats[1].clone());
    net.gains.insert(liar.clone(), HONEST_GAIN * 3);
    // In the dispute: the liar lies again; a final voter copies the most common opened gain
    // (the honest main-window one) and, having computed no probe, guesses the dispute windows'
    // as the same number.
    net.revote_gains.insert(liar.clone(), HONEST_GAIN * 3);
    net.dispute_gains.insert(liar.clone(), HONEST_GAIN * 3);
    let copier = finals[0].clone();
    net.dispute_gains.insert(copier.clone(), HONEST_GAIN);
    // Another final voter committed a pass without the dispute windows' gain: refused at the
    // opening, so it is a missed vote.
    let gainless = finals[1].clone();
    net.no_dispute_gain.insert(gainless.clone());
    for _ in 0..3 {
        net.play_round(&honest, &h); // verify, objection, verdict_reveal
    }
    assert_eq!(net.phase(), "dispute");
    // A seat that does not re-vote: its round-0 pass stands nowhere.
    for validator in v.iter() {
        for (host, segment) in net.to_commit(validator) {
            if *validator != lazy_seat || host != h[0] || segment != 1 {
                net.commit_verdict(validator, &host, segment, "pass");
            }
        }
    }
    net.settle();
    let deadline = net.info()["phase_deadline"].as_u64().unwrap();
    net.chain.wait_until(deadline);
    net.chain.ok(&h[0].clone(), json!({"advance": {}}));
    net.settle();
    assert_eq!(net.phase(), "dispute_reveal");
    let err = net
        .chain
        .refused(&gainless, net.opening(&gainless, &h[0], 1, "pass"));
    assert!(
        err.contains("must carry the host's gain on its dispute windows"),
        "{err}"
    );
    let (g_, h0) = (gainless.clone(), h[0].clone());
    net.reveal_round(
        &move |who: &str, host: &str, segment: u64| {
            who == g_.as_str() && host == h0.as_str() && segment == 1
        },
        &h,
    );
    net.settle();
    let deadline = net.info()["phase_deadline"].as_u64().unwrap();
    net.chain.wait_until(deadline);
    net.chain.ok(&h[0].clone(), json!({"advance": {}}));
    net.settle();
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    let c = net.challenge(&h[0], 1);
    assert_eq!(
        (c["outcome"].as_str(), c["gain_micro"].as_i64()),
        (Some("pass"), Some(HONEST_GAIN))
    );
    let outcome = |who: &str| row(&report, "validators", who)["outcome"].clone();
    assert_eq!(
        outcome(&copier),
        "wrong",
        "a copied gain is outside the deciding group"
    );
    assert_eq!(outcome(&liar), "wrong");
    assert_eq!(outcome(&lazy_seat), "silent", "a re-vote owed and not sent");
    assert_eq!(outcome(&gainless), "silent", "its opening was refused");
    for honest_one in v
        .iter()
        .filter(|x| ![&copier, &liar, &lazy_seat, &gainless].contains(x))
    {
        assert_eq!(outcome(honest_one), "diligent", "{honest_one}");
    }
    assert!(amount(&row(&report, "validators", &copier)["slashed"]) > 0);
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "accepted");
}

#[test]
fn a_gain_dispute_waits_for_the_round0_openings_it_carries() {
    let mut net = probe_net_of(6);
    let h = net.hosts.clone();
    net.play_to_verify();
    let seats = first_round(&net.challenge(&h[0], 1));
    assert_eq!(seats.len(), 3, "{seats:?}");
    let late = seats[2].clone();
    net.gains.insert(seats[0].clone(), HONEST_GAIN * 3);
    net.play_round(&honest, &h); // verify
    net.play_round(&honest, &h); // objection
    assert_eq!(net.phase(), "verdict_reveal");
    // `late` keeps its pass on (h0, 1) closed in verdict_reveal; the two opened gains differ.
    let (late_, h0) = (late.clone(), h[0].clone());
    let withheld = move |who: &str, host: &str, segment: u64| {
        who == late_.as_str() && host == h0.as_str() && segment == 1
    };
    net.reveal_round(&withheld, &h);
    net.settle();
    let deadline = net.info()["phase_deadline"].as_u64().unwrap();
    net.chain.wait_until(deadline);
    net.chain.ok(&h[0].clone(), json!({"advance": {}}));
    net.settle();
    assert_eq!(net.phase(), "dispute");
    net.play_round(&honest, &h); // every re-vote and final vote committed: closes early
    assert_eq!(net.phase(), "dispute_reveal");
    net.reveal_round(&withheld, &h);
    net.settle();
    assert_eq!(net.phase(), "dispute_reveal");
    // Its round-0 opening alone does not close the phase: its re-vote is still owed.
    net.opening_round0 = true;
    let msg = net.opening(&late, &h[0], 1, "pass");
    net.opening_round0 = false;
    net.chain.ok(&late, msg);
    net.settle();
    assert_eq!(
        net.phase(),
        "dispute_reveal",
        "the carried round-0 commitment and the re-vote both open before it closes"
    );
    net.reveal_verdict(&late, &h[0], 1);
    net.settle();
    assert_eq!(net.phase(), "propose", "everyone opened: it closes early");
    let report = net.chain.report(0);
    assert_eq!(row(&report, "validators", &late)["outcome"], "diligent");
    assert_eq!(
        net.challenge(&h[0], 1)["gain_micro"].as_i64(),
        Some(HONEST_GAIN)
    );
}

#[test]
fn a_gain_dispute_revote_must_repeat_the_round0_pass() {
    let mut net = probe_net();
    let h = net.hosts.clone();
    net.play_to_verify();
    let seats = first_round(&net.challenge(&h[0], 1));
    net.gains.insert(seats[0].clone(), HONEST_GAIN * 3);
    for _ in 0..3 {
        net.play_round(&honest, &h);
    }
    assert_eq!(net.phase(), "dispute");
    // A seat that passed in round 0 re-votes fail: committed, but its opening is refused.
    let seat = seats[1].clone();
    net.commit_verdict(&seat, &h[0], 1, "fail");
    net.play_round(&honest, &h);
    assert_eq!(net.phase(), "dispute_reveal");
    let msg = net.opening(&seat, &h[0], 1, "fail");
    let err = net.chain.refused(&seat, msg);
    assert!(err.contains("must repeat the seat's round-0 pass"), "{err}");
}

/// Records and messages from before the probe gain read as carrying none.
#[test]
fn old_votes_assignments_and_openings_read_without_a_gain() {
    use crate::records::{Assignment, Vote};
    let vote: Vote = serde_json::from_value(json!({"o": "pass", "d": "0", "e": digest("e"),
                                                    "s": digest("s")}))
    .unwrap();
    assert_eq!(vote.gain_micro, None);
    // Nor, before gain disputes carried two gains, a dispute-window gain or a round-0 one.
    assert_eq!(
        (vote.dispute_gain_micro, vote.first_gain_micro),
        (None, None)
    );
    let a: Assignment = serde_json::from_value(json!({"g": 1, "v": [0, 2], "o": "pass"})).unwrap();
    assert_eq!(
        (a.gain_micro, a.dispute_gain_micro, a.gain_dispute),
        (None, None, false)
    );
    // Written back, a record without a gain is byte for byte what it was.
    assert!(!serde_json::to_string(&vote).unwrap().contains("\"q\""));
    let msg: crate::msg::ExecuteMsg = parse_json(
        "execute message",
        json!({"reveal_verdict": {"epoch": 0, "host": "h", "segment": 1, "outcome": "pass",
                                  "distance": "0", "evidence": digest("e"), "salt": digest("s")}})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    match msg {
        crate::msg::ExecuteMsg::RevealVerdict { gain_micro, .. } => assert_eq!(gain_micro, None),
        other => panic!("parsed as {other:?}"),
    }
}

// Adversarial cases of two epochs in flight (issue 30 review).
mod pipelined_attacks;

// The delayed seed: one VDF output picks every picker's challenges (issue 30).
mod delayed_seed;

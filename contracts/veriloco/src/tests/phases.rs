//! The phase machine on the native store: whole epochs driven through `contract::execute` and
//! read back through `contract::query`, as the chain would (one transaction per block, a refused
//! transaction reverted, funds moved in before the contract runs and bank sends paid after).
//! After every transaction the books must balance: the contract's balance equals bonded +
//! unbonding + reward pool.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::beacon;
use crate::contract;
use crate::error::ContractError;
use crate::hashing::{hex, tagged_hash};
use crate::msg::parse_json;
use crate::testing::MockDeps;
use crate::types::{BankMsg, CosmosMsg, Env, MessageInfo, Response};

const DENOM: &str = "inj";
const START: u64 = 100;

/// The shared vector's real spec, with small stakes, short phases and `changes` merged into its
/// sections.
fn spec_with(changes: Value) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/spec.json");
    let vector: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut spec: Value = serde_json::from_str(vector["spec_json"].as_str().unwrap()).unwrap();
    let base = json!({
        "economics": {"min_host_stake": "100", "min_validator_stake": "50",
                      "reward_per_epoch": "1000"},
        "phases": {"join_blocks": 50, "train_blocks": 50, "reveal_blocks": 50,
                   "verify_blocks": 50, "propose_blocks": 50, "min_hosts": 1,
                   "min_validators": 1},
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
    fn new(spec_json: &str) -> Chain {
        let deps = MockDeps::default();
        let treasury = deps.api.addr("treasury");
        let mut chain = Chain {
            deps,
            height: START - 1,
            balance: 0,
            paid: BTreeMap::new(),
            treasury,
        };
        let msg = json!({"spec_json": spec_json, "initial_model_hash": hex(&[0u8; 32]),
                         "denom": DENOM, "treasury": chain.treasury});
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
        result
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

    fn report(&self, epoch: u64) -> Value {
        self.query(json!({"report": {"epoch": epoch}}))
    }

    fn status(&self, address: &str) -> Value {
        self.query(json!({"participant": {"address": address}}))
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
}

impl Net {
    /// `hosts` hosts staking 1000 and `validators` validators staking 500, bonded, and a reward
    /// pool of 1000.
    fn new(spec_json: &str, hosts: usize, validators: usize) -> Net {
        let mut chain = Chain::new(spec_json);
        let hosts: Vec<String> = (0..hosts)
            .map(|i| chain.addr(&format!("host-{i}")))
            .collect();
        let validators: Vec<String> = (0..validators)
            .map(|i| chain.addr(&format!("validator-{i}")))
            .collect();
        for (i, h) in hosts.iter().enumerate() {
            let bond =
                json!({"bond": {"role": "host", "endpoint": format!("http://host-{i}:8700")}});
            chain.pay(h, bond, 1000);
        }
        for v in validators.iter() {
            chain.pay(
                v,
                json!({"bond": {"role": "validator", "endpoint": "http://v"}}),
                500,
            );
        }
        let funder = chain.addr("funder");
        chain.pay(&funder, json!({"fund_rewards": {}}), 1000);
        Net {
            chain,
            hosts,
            validators,
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
        self.chain.epoch()["epoch"].as_u64().unwrap()
    }

    fn join(&mut self, who: &str) -> Response {
        let e = self.epoch_number();
        let commit = hex(&beacon::commitment(who, e, &secret(who)));
        self.chain
            .ok(who, json!({"join": {"epoch": e, "beacon_commit": commit}}))
    }

    fn commit(&mut self, host: &str) -> Response {
        let e = self.epoch_number();
        let msg = json!({"commit": {"epoch": e, "checkpoint_root": digest(&format!("root {host}")),
                                    "delta_hash": digest(&format!("delta {host}")),
                                    "loss_digest": digest("losses"), "segments": 2,
                                    "train_loss_micro": 2_000_000}});
        self.chain.ok(host, msg)
    }

    fn reveal(&mut self, who: &str) -> Response {
        let e = self.epoch_number();
        self.chain.ok(
            who,
            json!({"reveal": {"epoch": e, "secret": hex(&secret(who))}}),
        )
    }

    /// `validator`'s pending challenges: (host, segment).
    fn challenges(&self, validator: &str) -> Vec<(String, u64)> {
        let e = self.epoch_number();
        let answer = self
            .chain
            .query(json!({"challenges": {"epoch": e, "validator": validator}}));
        answer["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c["voted"].as_bool().unwrap())
            .map(|c| {
                (
                    c["host"].as_str().unwrap().to_string(),
                    c["segment"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn verdict(&mut self, validator: &str, host: &str, segment: u64, outcome: &str) -> Response {
        let e = self.epoch_number();
        let msg = json!({"verdict": {"epoch": e, "host": host, "segment": segment,
                                     "outcome": outcome, "distance": "0.5",
                                     "evidence": digest("evidence")}});
        self.chain.ok(validator, msg)
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
        assert_eq!(self.chain.epoch()["phase"], "verify");
    }

    fn phase(&self) -> String {
        self.chain.epoch()["phase"].as_str().unwrap().to_string()
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
    assert_eq!(seed[0]["verdicts_expected"], "12");
    // Every challenge gets both validators (r = 2); each host has k + 1 = 2 challenges.
    for validator in v.iter() {
        assert_eq!(net.challenges(validator).len(), 6);
    }
    let mut finalized = None;
    for validator in v.iter() {
        for (host, segment) in net.challenges(validator) {
            finalized = Some(net.verdict(validator, &host, segment, "pass"));
        }
    }
    let finalized = finalized.unwrap();
    assert_eq!(attr(&finalized, "finalize", "accepted"), Some("3"));
    assert_eq!(net.phase(), "propose");
    // 80 % of the 1000 paid to 3 accepted hosts, 20 % to 2 diligent validators.
    let report = net.chain.report(0);
    for host in h.iter() {
        assert_eq!(row(&report, "hosts", host)["outcome"], "accepted");
        assert_eq!(amount(&row(&report, "hosts", host)["reward"]), 266);
        assert_eq!(net.chain.paid[host], 266);
    }
    for validator in v.iter() {
        let r = row(&report, "validators", validator);
        assert_eq!(
            (r["outcome"].as_str(), r["assigned"].as_u64()),
            (Some("diligent"), Some(6))
        );
        assert_eq!(net.chain.paid[validator], 100);
    }
    // The unpaid remainder stays in the pool.
    let books = net.chain.query(json!({"accounting": {}}));
    assert_eq!(amount(&books["reward_pool"]), 1000 - 3 * 266 - 2 * 100);

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
    assert_eq!(closed["agreed"], true);
    let next = net.chain.epoch();
    assert_eq!(next["epoch"], 1);
    assert_eq!(next["phase"], "join");
    assert_eq!(next["model_hash"], theta.as_str());
    assert_eq!(next["prev_seed"], closed["seed"]);
    assert_eq!(next["started_at"].as_u64(), Some(net.chain.height));
}

#[test]
fn deadlines_close_phases_at_the_deadline_and_extend_a_short_join() {
    let phases = json!({"phases": {"min_hosts": 2, "join_blocks": 10, "train_blocks": 10,
                                   "reveal_blocks": 10, "verify_blocks": 10}});
    let mut net = Net::new(&spec_with(phases), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.join(&h[0]);
    net.join(&v[0]);
    let err = net.chain.refused(&h[1], json!({"advance": {}}));
    assert!(
        err.starts_with("advance: nothing is due: epoch 0 is in phase join until height 110"),
        "{err}"
    );
    // Past the deadline without the minimums: extended by whole periods, members stay joined.
    net.chain.wait_until(125);
    let extended = net.chain.ok(&h[1], json!({"advance": {}}));
    let phase = &events(&extended, "phase")[0];
    assert_eq!(phase["extended"], "true");
    assert_eq!((phase["at"], phase["deadline"]), ("110", "130"));
    assert_eq!(net.phase(), "join");
    net.join(&h[1]);
    let train_start = net.chain.height;
    assert_eq!(net.phase(), "train");
    // Nobody acts; one advance far later closes train and reveal at their deadlines, verify at
    // once (nobody to wait for), finalizes with nobody accepted, and opens epoch 1.
    net.chain.wait_until(train_start + 100);
    let response = net.chain.ok(&v[0], json!({"advance": {}}));
    let train_end = train_start + 10;
    let reveal_end = train_end + 10;
    let phases: Vec<(&str, &str)> = events(&response, "phase")
        .iter()
        .map(|p| (p["phase"], p["at"]))
        .collect();
    let (t, r) = (train_end.to_string(), reveal_end.to_string());
    assert_eq!(
        phases[..3],
        [
            ("reveal", t.as_str()),
            ("verify", r.as_str()),
            ("join", r.as_str())
        ]
    );
    let closed = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(closed["phase_deadline"].as_u64(), Some(reveal_end));
    assert_eq!(closed["next_model_hash"], closed["model_hash"]);
    assert_eq!(closed["agreed"], false);
    // Epoch 1's join phase (from reveal_end) was due too, without joins: extended.
    let info = net.chain.epoch();
    assert_eq!(
        (info["epoch"].as_u64(), info["started_at"].as_u64()),
        (Some(1), Some(reveal_end))
    );
    assert!(info["phase_deadline"].as_u64().unwrap() > net.chain.height);
    // Hosts that neither committed nor revealed pay both slashes (5 % + 5 % of 1000).
    let report = net.chain.report(0);
    for host in h.iter() {
        let r = row(&report, "hosts", host);
        assert_eq!(
            (r["outcome"].as_str(), amount(&r["slashed"])),
            (Some("absent"), 100)
        );
    }
    let r = row(&report, "validators", &v[0]);
    assert_eq!(
        (r["outcome"].as_str(), amount(&r["slashed"])),
        (Some("no_reveal"), 25)
    );
    assert_eq!(net.chain.paid[&net.chain.treasury], 225);
}

#[test]
fn reveal_close_marks_absent_and_silent_participants_and_challenges_the_rest() {
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
    net.reveal(&h[2]); // revealed without a commitment: absent
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
    assert!(net.challenges(&v[1]).is_empty());
    let report = net.chain.report(0);
    let outcome = |role: &str, a: &str| {
        row(&report, role, a)["outcome"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(outcome("hosts", &h[0]), "pending");
    assert_eq!(outcome("hosts", &h[1]), "no_reveal");
    assert_eq!(outcome("hosts", &h[2]), "absent");
    assert_eq!(outcome("validators", &v[1]), "no_reveal");
    for (host, segment) in net.challenges(&v[0]) {
        assert_eq!(host, h[0]);
        net.verdict(&v[0], &host, segment, "pass");
    }
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    assert_eq!(row(&report, "hosts", &h[0])["outcome"], "accepted");
    assert_eq!(amount(&row(&report, "hosts", &h[1])["slashed"]), 50);
    assert_eq!(amount(&row(&report, "hosts", &h[2])["slashed"]), 50);
    assert_eq!(amount(&row(&report, "validators", &v[1])["slashed"]), 25);
    // The only accepted host takes the whole host share; the only diligent validator the rest.
    assert_eq!(net.chain.paid[&h[0]], 800);
    assert_eq!(net.chain.paid[&v[0]], 200);
}

#[test]
fn finalize_slashes_cheaters_and_pays_catchers_and_the_treasury() {
    // Every challenge gets all four validators (r = 4).
    let spec =
        spec_with(json!({"verification": {"validators_r": 4}, "phases": {"max_validators": 4}}));
    let mut net = Net::new(&spec, 3, 4);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    net.play_to_verify();
    // v0 and v1 catch h0; v2 votes pass on it (against the majority); v3 never votes.
    for validator in v[..3].iter() {
        for (host, segment) in net.challenges(validator) {
            let fail = host == h[0] && validator != &v[2];
            net.verdict(
                validator,
                &host,
                segment,
                if fail { "fail" } else { "pass" },
            );
        }
    }
    assert_eq!(net.phase(), "verify", "v3's verdicts are still expected");
    net.chain.wait_past_deadline();
    let response = net.chain.ok(&v[3], json!({"advance": {}}));
    assert_eq!(attr(&response, "finalize", "slashed_total"), Some("625"));
    let report = net.chain.report(0);
    let h0 = row(&report, "hosts", &h[0]);
    assert_eq!(
        (h0["outcome"].as_str(), amount(&h0["slashed"])),
        (Some("invalid"), 500)
    );
    for c in report["challenges"].as_array().unwrap() {
        let want = if c["host"] == h[0].as_str() {
            "fail"
        } else {
            "pass"
        };
        assert_eq!(c["outcome"], want);
    }
    let vrow = |a: &str| row(&report, "validators", a).clone();
    assert_eq!(vrow(&v[0])["outcome"], "diligent");
    assert_eq!(amount(&vrow(&v[0])["catcher_reward"]), 125);
    assert_eq!(vrow(&v[2])["outcome"], "wrong");
    assert_eq!(vrow(&v[2])["against_majority"], 2);
    assert_eq!(amount(&vrow(&v[2])["slashed"]), 100);
    assert_eq!(vrow(&v[3])["outcome"], "silent");
    assert_eq!(amount(&vrow(&v[3])["slashed"]), 25);
    // Catchers: half of h0's 500, split; the treasury: the other half, plus v2's and v3's slash.
    assert_eq!(net.chain.paid[&v[0]], 125 + 100);
    assert_eq!(net.chain.paid[&v[1]], 125 + 100);
    assert_eq!(net.chain.paid[&h[1]], 400);
    assert_eq!(net.chain.paid[&h[2]], 400);
    assert!(!net.chain.paid.contains_key(&h[0]));
    assert_eq!(net.chain.paid[&net.chain.treasury], 250 + 100 + 25);
    assert_eq!(report["to_catchers"], "250");
    // The member records: stake taken, lifetime totals kept.
    let member = net.chain.query(json!({"member": {"address": h[0]}}));
    assert_eq!(
        (amount(&member["bonded"]), amount(&member["slashed_total"])),
        (500, 500)
    );
    let member = net.chain.query(json!({"member": {"address": v[0]}}));
    assert_eq!(amount(&member["rewarded_total"]), 225);
    // The invalid host is not an aggregation input and may not propose.
    let err = net.chain.refused(
        &h[0],
        json!({"propose_model": {"epoch": 0, "model_hash": digest("x"), "val_loss_micro": 1}}),
    );
    assert!(err.contains("is not an accepted host of epoch 0"), "{err}");
}

#[test]
fn a_split_vote_keeps_the_model() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let h = net.hosts.clone();
    net.play_to_verify();
    for (host, segment) in net.challenges(&net.validators[0].clone()) {
        let validator = net.validators[0].clone();
        net.verdict(&validator, &host, segment, "pass");
    }
    net.propose(&h[0], &digest("a"));
    let closing = net.propose(&h[1], &digest("b"));
    assert_eq!(attr(&closing, "epoch", "agreed"), Some("false"));
    let closed = net.chain.query(json!({"epoch": {"epoch": 0}}));
    assert_eq!(closed["next_model_hash"], closed["model_hash"]);
    assert_eq!(net.chain.epoch()["model_hash"], closed["model_hash"]);
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
    // Idle validators earn nothing: their share stays in the pool.
    assert_eq!(net.chain.paid[&h[0]], 400);
    assert!(!net.chain.paid.contains_key(&v[0]));
}

#[test]
fn refusals_name_the_message_and_the_reason() {
    let mut net = Net::new(&spec_with(json!({})), 2, 1);
    let (h, v) = (net.hosts.clone(), net.validators.clone());
    let stranger = net.chain.addr("stranger");
    let commit = json!({"commit": {"epoch": 0, "checkpoint_root": digest("r"),
                                   "delta_hash": digest("d"), "loss_digest": digest("l"),
                                   "segments": 2, "train_loss_micro": 1}});
    assert_eq!(
        net.chain.refused(&h[0], commit.clone()),
        "commit: epoch 0 is in phase join; commit is accepted in phase train only"
    );
    let join_1 = json!({"join": {"epoch": 1, "beacon_commit": digest("c")}});
    assert_eq!(
        net.chain.refused(&h[0], join_1),
        "join: epoch 1 has not started; the current epoch is 0"
    );
    let join = json!({"join": {"epoch": 0, "beacon_commit": digest("c")}});
    assert_eq!(
        net.chain.refused(&stranger, join.clone()),
        format!("join: {stranger} is not a member; bond first")
    );
    let err = net.chain.execute(&h[0], join, 5).unwrap_err().to_string();
    assert_eq!(err, "join: does not accept funds, got 5inj");
    let bad_hex = json!({"join": {"epoch": 0, "beacon_commit": "ABC"}});
    assert_eq!(
        net.chain.refused(&h[0], bad_hex),
        "join: beacon_commit must be 64 lowercase hex characters, got \"ABC\""
    );
    for who in net.everyone() {
        net.join(&who);
    }
    let wrong_segments = json!({"commit": {"epoch": 0, "checkpoint_root": digest("r"),
                                           "delta_hash": digest("d"), "loss_digest": digest("l"),
                                           "segments": 3, "train_loss_micro": 1}});
    assert_eq!(
        net.chain.refused(&h[0], wrong_segments),
        "commit: segments is 3, but the run has 2 segments per epoch"
    );
    assert_eq!(
        net.chain.refused(&v[0], commit),
        format!(
            "commit: {} joined epoch 0 as a validator; only hosts may commit",
            v[0]
        )
    );
    for host in h.iter() {
        net.commit(host);
    }
    let wrong_secret = json!({"reveal": {"epoch": 0, "secret": digest("not mine")}});
    let err = net.chain.refused(&h[0], wrong_secret);
    assert!(
        err.starts_with("reveal: the secret does not match the beacon commitment"),
        "{err}"
    );
    let unknown = json!({"unknown": {}});
    let err = net.chain.refused(&h[0], unknown);
    assert!(
        err.starts_with("invalid execute message: unknown variant `unknown`"),
        "{err}"
    );
    for who in net.everyone() {
        net.reveal(&who);
    }
    let (host, segment) = net.challenges(&v[0])[0].clone();
    let by_host = json!({"verdict": {"epoch": 0, "host": host, "segment": segment,
                                     "outcome": "pass", "distance": "0", "evidence": digest("e")}});
    assert_eq!(
        net.chain.refused(&h[1], by_host),
        format!(
            "verdict: {} is not assigned to host {host} segment {segment} of epoch 0",
            h[1]
        )
    );
    let bad_distance = json!({"verdict": {"epoch": 0, "host": host, "segment": segment,
                                          "outcome": "pass", "distance": "0.50",
                                          "evidence": digest("e")}});
    assert_eq!(
        net.chain.refused(&v[0], bad_distance),
        "verdict: distance must be a canonical decimal string like \"0.0123\", got \"0.50\""
    );
    net.verdict(&v[0], &host, segment, "pass");
    let again = json!({"verdict": {"epoch": 0, "host": host, "segment": segment,
                                   "outcome": "fail", "distance": "0", "evidence": digest("e")}});
    let err = net.chain.refused(&v[0], again);
    assert!(err.contains("already voted on host"), "{err}");
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
    assert_eq!(status["stake"], "0");
    for who in net.everyone() {
        net.join(&who);
    }
    let status = net.chain.status(&h[0]);
    assert_eq!(
        (status["joined"].as_bool(), status["role"].as_str()),
        (Some(true), Some("host"))
    );
    assert_eq!(
        (status["stake"].as_str(), status["committed"].as_bool()),
        (Some("1000"), Some(false))
    );
    net.commit(&h[0]);
    assert_eq!(net.chain.status(&h[0])["committed"], true);
    assert_eq!(net.chain.status(&h[1])["committed"], false);
    net.commit(&h[1]);
    for who in net.everyone() {
        assert_eq!(net.chain.status(&who)["revealed"], false);
        net.reveal(&who);
        assert_eq!(net.chain.status(&who)["revealed"], true);
    }
    let status = net.chain.status(&v[0]);
    assert_eq!(
        (status["assigned"].as_u64(), status["voted"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(status["outcome"], "pending");
    let pending = net.challenges(&v[0]);
    let (host, segment) = pending[0].clone();
    net.verdict(&v[0], &host, segment, "pass");
    assert_eq!(net.chain.status(&v[0])["voted"], 1);
    for (host, segment) in pending[1..].iter() {
        net.verdict(&v[0], host, *segment, "pass");
    }
    let status = net.chain.status(&v[0]);
    assert_eq!(
        (status["outcome"].as_str(), status["phase"].as_str()),
        (Some("diligent"), Some("propose"))
    );
    assert_eq!(net.chain.status(&h[0])["outcome"], "accepted");
    net.propose(&h[0], &digest("theta"));
    assert_eq!(net.chain.status(&h[0])["proposed"], true);
    assert_eq!(net.chain.status(&h[1])["proposed"], false);
    // A past epoch by number; an address that is not a participant; a bad address.
    let old = net
        .chain
        .query(json!({"participant": {"address": h[0], "epoch": 0}}));
    assert_eq!(old["epoch"], 0);
    let stranger = net.chain.addr("stranger");
    assert_eq!(net.chain.status(&stranger)["joined"], false);
    let msg = parse(json!({"participant": {"address": "inj1bad"}}));
    let err = contract::query(net.chain.deps.as_ref(), net.chain.env(), msg).unwrap_err();
    assert!(
        err.to_string().starts_with("participant: invalid address"),
        "{err}"
    );
    let msg = parse(json!({"participant": {"address": h[0], "epoch": 9}}));
    let err = contract::query(net.chain.deps.as_ref(), net.chain.env(), msg).unwrap_err();
    assert_eq!(
        err.to_string(),
        "participant: epoch 9 has not started; the current epoch is 0"
    );
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
    // Before finalize there is nothing to aggregate.
    let none = net.chain.query(json!({"aggregation_inputs": {"epoch": 0}}));
    assert!(none["hosts"].as_array().unwrap().is_empty());
    net.chain.wait_past_deadline();
    net.chain.ok(&v[0], json!({"advance": {}}));
    for who in net.everyone() {
        net.reveal(&who);
    }
    for validator in v.iter() {
        for (host, segment) in net.challenges(validator) {
            net.verdict(validator, &host, segment, "pass");
        }
    }
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

//! Every shared vector file under `tests/vectors/` (written by `tests/vectors/make_vectors.py`
//! from the Python implementation) against the contract's code. Rules the contract does not run
//! (the Merkle tree, the loss digest, batch indices) are written here from `docs/protocol.md`, so
//! the byte-level spec has a second implementation for each of them too.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

use crate::beacon::{commitment, epoch_seed, genesis_seed};
use crate::classes;
use crate::commitments::{trap_commitment, verdict_commitment};
use crate::epoch::handlers::is_canonical_decimal;
use crate::hashing::{hex, tag, tagged_hash, u64be};
use crate::limits;
use crate::records::VoteOutcome;
use crate::sampling::{pickers, picks, seat_rank, stake_committee, stake_seats, StakePool, Stream};
use crate::spec::parse_spec;
use crate::types::Uint128;
use crate::vdf;

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// A shared vector file (`tests/vectors/<name>.json`).
fn vectors(name: &str) -> Value {
    let path = vectors_dir().join(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("vector file is JSON")
}

/// The files this module checks, one test each.
const CHECKED: [&str; 15] = [
    "amounts",
    "architectures",
    "beacon",
    "classes",
    "commitments",
    "decimals",
    "endpoints",
    "hashing",
    "limits",
    "losses",
    "merkle",
    "sampling",
    "spec",
    "stream",
    "vdf",
];

#[test]
fn every_vector_file_is_checked() {
    let found: BTreeSet<String> = std::fs::read_dir(vectors_dir())
        .expect("tests/vectors exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().map_or(false, |e| e == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let checked: BTreeSet<String> = CHECKED.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        found, checked,
        "a vector file without a Rust check (or the reverse)"
    );
}

fn unhex(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn b32(text: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&unhex(text));
    out
}

fn str_of(v: &Value) -> &str {
    v.as_str().expect("a string")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| str_of(x).to_string())
        .collect()
}

fn cases<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    let list = v[key].as_array().expect("an array of cases");
    assert!(!list.is_empty(), "no cases under {key}");
    list
}

#[test]
fn hashing() {
    for case in cases(&vectors("hashing"), "cases") {
        let data = unhex(str_of(&case["data_hex"]));
        let digest = tagged_hash(str_of(&case["tag"]), &[&data]);
        assert_eq!(hex(&digest), str_of(&case["digest"]));
    }
}

#[test]
fn stream_and_uniform() {
    let v = vectors("stream");
    let all = cases(&v, "cases");
    assert_eq!(all.len(), 4);
    for case in all {
        let tag_name = str_of(&case["tag"]);
        let material = unhex(str_of(&case["material_hex"]));
        let mut s = Stream::new(tag_name, material.clone());
        for want in case["first_u64"].as_array().unwrap() {
            assert_eq!(s.next_u64().to_string(), str_of(want));
        }
        let n: u64 = str_of(&case["n"]).parse().unwrap();
        let mut s = Stream::new(tag_name, material);
        for want in case["uniform"].as_array().unwrap() {
            assert_eq!(s.uniform(n).to_string(), str_of(want));
        }
    }
}

/// The batch indices of `docs/protocol.md` ("Sampling"); the contract does not need them.
fn batch_indices(
    run_id: &[u8],
    prev: &[u8],
    host: &str,
    step: u64,
    batch: usize,
    n: u64,
) -> Vec<u64> {
    let mut material = run_id.to_vec();
    material.extend_from_slice(prev);
    material.extend_from_slice(host.as_bytes());
    material.push(0);
    material.extend_from_slice(&u64be(step));
    let mut stream = Stream::new(tag::SAMPLE_BATCH, material);
    (0..batch).map(|_| stream.uniform(n)).collect()
}

#[test]
fn sampling() {
    let v = vectors("sampling");
    for case in cases(&v, "batch_indices") {
        let got = batch_indices(
            &unhex(str_of(&case["run_id"])),
            &unhex(str_of(&case["prev_epoch_seed"])),
            str_of(&case["host"]),
            case["step"].as_u64().unwrap(),
            case["batch_size"].as_u64().unwrap() as usize,
            case["n_windows"].as_u64().unwrap(),
        );
        let want: Vec<u64> = case["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(got, want);
    }
    // `challenged_segments` is a Python rule only now (the detection estimates); the contract
    // draws pickers and their picks.
    let stakes = |case: &Value| -> Vec<(String, u128)> {
        case.as_array()
            .unwrap()
            .iter()
            .map(|pair| {
                let pair = pair.as_array().unwrap();
                (
                    str_of(&pair[0]).to_string(),
                    str_of(&pair[1]).parse::<u128>().unwrap(),
                )
            })
            .collect()
    };
    for case in cases(&v, "uniform128") {
        let mut stream = Stream::new(tag::SAMPLE_PICKERS, unhex(str_of(&case["material_hex"])));
        let n: u128 = str_of(&case["n"]).parse().unwrap();
        for want in strings(&case["uniform128"]) {
            assert_eq!(stream.uniform128(n).to_string(), want);
        }
    }
    for case in cases(&v, "stake_seats") {
        let pool_of = stakes(&case["candidates"]);
        let pool = StakePool::new(pool_of.iter().map(|(a, s)| (a.as_str(), *s)));
        let mut stream = Stream::new(tag::SAMPLE_PICKERS, unhex(str_of(&case["material_hex"])));
        let got = stake_seats(&mut stream, &pool, case["m"].as_u64().unwrap() as usize);
        assert_eq!(got, strings(&case["seats"]), "case {case}");
    }
    for case in cases(&v, "stake_committees") {
        let pool_of = stakes(&case["candidates"]);
        let pool = StakePool::new(pool_of.iter().map(|(a, s)| (a.as_str(), *s)));
        let got = stake_committee(
            tag::SAMPLE_PICKERS,
            unhex(str_of(&case["material_hex"])),
            &pool,
            case["cap"].as_u64().unwrap() as u32,
        );
        assert_eq!(got, strings(&case["committee"]), "case {case}");
    }
    let picker_cases = cases(&v, "pickers");
    assert!(picker_cases.len() >= 9);
    for case in picker_cases {
        let host = str_of(&case["host"]);
        let validators = stakes(&case["validators"]);
        let got = pickers(
            &b32(str_of(&case["prev_seed"])),
            host,
            &validators,
            case["cap"].as_u64().unwrap() as u32,
        );
        assert_eq!(got, strings(&case["pickers"]), "case {case}");
        assert!(!got.iter().any(|v| *v == host));
    }
    for case in cases(&v, "picks") {
        let got = picks(
            &b32(str_of(&case["secret"])),
            str_of(&case["host"]),
            case["segments"].as_u64().unwrap() as u32,
            case["k"].as_u64().unwrap() as u32,
        );
        let want: Vec<u32> = case["picks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got, want, "case {case}");
    }
    for case in cases(&v, "seat_ranks") {
        let got = seat_rank(&b32(str_of(&case["prev_seed"])), str_of(&case["address"]));
        assert_eq!(hex(&got), str_of(&case["rank"]));
    }
}

#[test]
fn compute_profile_classes() {
    let v = vectors("classes");
    let stakes = |case: &Value| -> Vec<(String, u128)> {
        case.as_array()
            .unwrap()
            .iter()
            .map(|p| (str_of(&p[0]).to_string(), str_of(&p[1]).parse().unwrap()))
            .collect()
    };
    for case in cases(&v, "pickers") {
        let class = str_of(&case["class"]);
        let mine = classes::of_class(
            &stakes(&case["validators"]),
            &strings(&case["classes"]),
            class,
        );
        let names: Vec<String> = mine.iter().map(|(a, _)| a.clone()).collect();
        assert_eq!(names, strings(&case["of_class"]), "case {case}");
        let min_validators = case["min_validators"].as_u64().unwrap() as u32;
        assert_eq!(
            classes::served(mine.len(), min_validators),
            case["served"].as_bool().unwrap()
        );
        let got = pickers(
            &b32(str_of(&case["prev_seed"])),
            str_of(&case["host"]),
            &mine,
            case["cap"].as_u64().unwrap() as u32,
        );
        assert_eq!(got, strings(&case["pickers"]), "case {case}");
    }
    for case in cases(&v, "electorates") {
        let got = classes::electorate(&strings(&case["v_classes"]), str_of(&case["class"]));
        let want: Option<Vec<u16>> = case["electorate"]
            .as_array()
            .map(|e| e.iter().map(|x| x.as_u64().unwrap() as u16).collect());
        assert_eq!(got, want, "case {case}");
    }
    for case in cases(&v, "validity") {
        let ok = classes::validate("join", str_of(&case["class"])).is_ok();
        assert_eq!(ok, case["valid"].as_bool().unwrap(), "case {case}");
    }
}

#[test]
fn beacon() {
    let v = vectors("beacon");
    for c in cases(&v, "commits") {
        let got = commitment(
            str_of(&c["address"]),
            c["epoch"].as_u64().unwrap(),
            &b32(str_of(&c["secret"])),
        );
        assert_eq!(hex(&got), str_of(&c["commit"]));
    }
    for case in cases(&v, "epoch_seeds") {
        let mut reveals: Vec<(String, [u8; 32])> = case["reveals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (str_of(&r["address"]).to_string(), b32(str_of(&r["secret"]))))
            .collect();
        // The contract reads reveals in address order (storage order); the vector lists them in
        // any order.
        reveals.sort_by(|a, b| a.0.cmp(&b.0));
        let got = epoch_seed(
            &b32(str_of(&case["run_id"])),
            case["epoch"].as_u64().unwrap(),
            &reveals,
        );
        assert_eq!(hex(&got), str_of(&case["seed"]));
    }
    let g = &v["genesis"];
    assert_eq!(
        hex(&genesis_seed(&b32(str_of(&g["run_id"])))),
        str_of(&g["seed"])
    );
}

// -- the Merkle tree (`docs/protocol.md`, "Merkle tree") --------------------------------------------

fn merkle_parent(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    tagged_hash(tag::MERKLE_NODE, &[left, right])
}

/// Every level of the tree, leaves' nodes first; an odd last node is promoted unchanged.
fn merkle_levels(leaves: &[[u8; 32]]) -> Vec<Vec<[u8; 32]>> {
    assert!(!leaves.is_empty());
    let mut levels = vec![leaves
        .iter()
        .map(|l| tagged_hash(tag::MERKLE_LEAF, &[l]))
        .collect::<Vec<_>>()];
    while levels.last().unwrap().len() > 1 {
        let level = levels.last().unwrap();
        let next = level
            .chunks(2)
            .map(|pair| match pair {
                [left, right] => merkle_parent(left, right),
                [single] => *single,
                _ => unreachable!(),
            })
            .collect();
        levels.push(next);
    }
    levels
}

fn merkle_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    merkle_levels(leaves).last().unwrap()[0]
}

/// The siblings of leaf `index`, bottom up (none where the node is promoted).
fn merkle_proof(leaves: &[[u8; 32]], mut index: usize) -> Vec<[u8; 32]> {
    let mut siblings = Vec::new();
    for level in merkle_levels(leaves).iter() {
        if level.len() == 1 {
            break;
        }
        let sibling = index ^ 1;
        if sibling < level.len() {
            siblings.push(level[sibling]);
        }
        index /= 2;
    }
    siblings
}

/// The verifier's walk: consume siblings by `index` and `width`, all of them, to the root.
fn merkle_verify(
    leaf: &[u8; 32],
    index: usize,
    leaf_count: usize,
    siblings: &[[u8; 32]],
    root: &[u8; 32],
) -> bool {
    if index >= leaf_count {
        return false;
    }
    let mut node = tagged_hash(tag::MERKLE_LEAF, &[leaf]);
    let (mut index, mut width) = (index, leaf_count);
    let mut rest = siblings.iter();
    while width > 1 {
        if index % 2 == 1 {
            match rest.next() {
                Some(s) => node = merkle_parent(s, &node),
                None => return false,
            }
        } else if index + 1 < width {
            match rest.next() {
                Some(s) => node = merkle_parent(&node, s),
                None => return false,
            }
        }
        index /= 2;
        width = (width + 1) / 2;
    }
    rest.next().is_none() && &node == root
}

#[test]
fn merkle() {
    for case in cases(&vectors("merkle"), "cases") {
        let leaves: Vec<[u8; 32]> = strings(&case["leaves"]).iter().map(|l| b32(l)).collect();
        let root = merkle_root(&leaves);
        assert_eq!(hex(&root), str_of(&case["root"]));
        let proofs = case["proofs"].as_array().unwrap();
        assert_eq!(proofs.len(), leaves.len());
        for (i, proof) in proofs.iter().enumerate() {
            assert_eq!(proof["index"].as_u64().unwrap() as usize, i);
            assert_eq!(proof["leaf_count"].as_u64().unwrap() as usize, leaves.len());
            let siblings: Vec<[u8; 32]> =
                strings(&proof["siblings"]).iter().map(|s| b32(s)).collect();
            assert_eq!(merkle_proof(&leaves, i), siblings, "proof of leaf {i}");
            assert!(merkle_verify(&leaves[i], i, leaves.len(), &siblings, &root));
            // The same proof opens no other leaf and no other position. (The width is taken
            // from the chain, not from the proof: `docs/protocol.md`.)
            let other = tagged_hash("x", &[&[i as u8]]);
            assert!(!merkle_verify(&other, i, leaves.len(), &siblings, &root));
            if leaves.len() > 1 {
                let wrong = (i + 1) % leaves.len();
                assert!(!merkle_verify(
                    &leaves[i],
                    wrong,
                    leaves.len(),
                    &siblings,
                    &root
                ));
            }
        }
    }
}

// -- the loss digest (`docs/protocol.md`, "Losses") ----------------------------------------------------

fn loss_digest(losses_micro: &[i64]) -> [u8; 32] {
    let mut data = u64be(losses_micro.len() as u64).to_vec();
    for l in losses_micro {
        data.extend_from_slice(&l.to_be_bytes());
    }
    tagged_hash(tag::LOSSES, &[&data])
}

#[test]
fn losses() {
    for case in cases(&vectors("losses"), "cases") {
        let losses: Vec<i64> = case["losses_micro"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(hex(&loss_digest(&losses)), str_of(&case["digest"]));
    }
}

// -- what the contract parses ----------------------------------------------------------------------

#[test]
fn decimals() {
    let v = vectors("decimals");
    for text in strings(&v["canonical"]) {
        assert!(is_canonical_decimal(&text), "{text:?} should be accepted");
    }
    for key in ["not_canonical", "negative", "too_long"] {
        for text in strings(&v[key]) {
            assert!(
                !is_canonical_decimal(&text),
                "{text:?} ({key}) should be refused"
            );
        }
    }
    for case in cases(&v, "normalized") {
        let canonical = str_of(&case["canonical"]);
        assert!(is_canonical_decimal(canonical), "{canonical:?}");
        let input = str_of(&case["input"]);
        assert_eq!(is_canonical_decimal(input), input == canonical, "{input:?}");
    }
}

#[test]
fn amounts() {
    let v = vectors("amounts");
    for text in strings(&v["valid"]) {
        let amount = Uint128::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(amount.to_string(), text);
        let parsed: Uint128 = serde_json::from_value(Value::String(text.clone())).unwrap();
        assert_eq!(parsed, amount);
    }
    for text in strings(&v["invalid"]) {
        assert!(Uint128::parse(&text).is_err(), "{text:?} should be refused");
    }
    assert_eq!(
        Uint128::parse(&u128::MAX.to_string()).unwrap(),
        Uint128(u128::MAX)
    );
}

#[test]
fn spec() {
    let v = vectors("spec");
    let text = str_of(&v["spec_json"]);
    let parsed = parse_spec(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.run_id, str_of(&v["run_id"]));
    assert_eq!(
        u64::from(parsed.view.segments()),
        v["segments"].as_u64().unwrap()
    );
    // The sections the contract enforces, as the spec states them.
    let json: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        serde_json::to_value(&parsed.view.economics).unwrap(),
        json["economics"]
    );
    assert_eq!(
        serde_json::to_value(&parsed.view.phases).unwrap(),
        json["phases"]
    );
    assert_eq!(
        parsed.view.verification.challenges_k as u64,
        json["verification"]["challenges_k"].as_u64().unwrap()
    );
    assert_eq!(
        parsed.view.verification.seats_cap as u64,
        json["verification"]["seats_cap"].as_u64().unwrap()
    );
    assert_eq!(
        parsed.view.verification.trap_max_distance,
        str_of(&json["verification"]["trap_max_distance"])
    );
    assert_eq!(
        parsed.view.verification.tau,
        str_of(&json["verification"]["tau"])
    );
    for key in ["not_canonical", "invalid"] {
        for bad in strings(&v[key]) {
            assert!(parse_spec(&bad).is_err(), "a spec from {key} was accepted");
        }
    }
    // The minimum-stake rule decides every case as Python decided it.
    for case in cases(&v, "stake_rule") {
        let mut changed = json.clone();
        for (field, value) in case.as_object().unwrap() {
            if field != "accepted" {
                changed["economics"][field.as_str()] = value.clone();
            }
        }
        let text = serde_json::to_string(&changed).unwrap();
        let accepted = case["accepted"].as_bool().unwrap();
        match parse_spec(&text) {
            Ok(_) => assert!(accepted, "the contract accepts {case}, Python refuses it"),
            Err(e) => assert!(
                !accepted,
                "the contract refuses {case}, Python accepts it: {e}"
            ),
        }
    }
}

#[test]
fn commitments() {
    let v = vectors("commitments");
    for case in cases(&v, "verdicts") {
        let outcome: VoteOutcome = serde_json::from_value(case["outcome"].clone()).unwrap();
        let got = verdict_commitment(
            str_of(&case["validator"]),
            case["epoch"].as_u64().unwrap(),
            str_of(&case["host"]),
            case["segment"].as_u64().unwrap() as u32,
            outcome.code(),
            str_of(&case["distance"]),
            &b32(str_of(&case["evidence"])),
            &b32(str_of(&case["salt"])),
            case.get("gain_micro").and_then(|g| g.as_i64()),
            case.get("dispute_gain_micro").and_then(|g| g.as_i64()),
        );
        assert_eq!(hex(&got), str_of(&case["commitment"]));
    }
    for case in cases(&v, "traps") {
        let segments: Vec<u32> = case["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = trap_commitment(
            str_of(&case["host"]),
            case["epoch"].as_u64().unwrap(),
            &segments,
            &b32(str_of(&case["salt"])),
        );
        assert_eq!(hex(&got), str_of(&case["commitment"]));
    }
}

#[test]
fn endpoints_are_judged_as_python_judges_them() {
    let v = vectors("endpoints");
    for endpoint in strings(&v["valid"]) {
        assert!(
            crate::staking::validate_endpoint(&endpoint).is_ok(),
            "{endpoint:?} refused"
        );
    }
    for endpoint in strings(&v["invalid"]) {
        assert!(
            crate::staking::validate_endpoint(&endpoint).is_err(),
            "{endpoint:?} accepted"
        );
    }
}

#[test]
fn architectures_equal_the_python_registry() {
    let v = vectors("architectures");
    let theirs: Vec<String> = strings(&v["names"]);
    let ours: Vec<String> = limits::ARCHITECTURES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        ours, theirs,
        "limits.rs ARCHITECTURES differs from protocol/rules/models.py"
    );
}

#[test]
fn limits_equal_the_python_definitions() {
    let v = vectors("limits");
    let ours: Vec<(&str, u64)> = vec![
        ("MAX_SEGMENTS", u64::from(limits::MAX_SEGMENTS)),
        ("MAX_PARTICIPANTS", u64::from(limits::MAX_PARTICIPANTS)),
        ("BPS_DENOMINATOR", u64::from(limits::BPS_DENOMINATOR)),
        ("MAX_BLOCKS", limits::MAX_BLOCKS),
        ("EPOCHS_PAGE", u64::from(limits::EPOCHS_PAGE)),
        (
            "EPOCHS_PAGE_DEFAULT",
            u64::from(limits::EPOCHS_PAGE_DEFAULT),
        ),
        ("MEMBERS_PAGE", u64::from(limits::MEMBERS_PAGE)),
        (
            "MEMBERS_PAGE_DEFAULT",
            u64::from(limits::MEMBERS_PAGE_DEFAULT),
        ),
        ("AGGREGATION_PAGE", u64::from(limits::AGGREGATION_PAGE)),
        (
            "AGGREGATION_PAGE_DEFAULT",
            u64::from(limits::AGGREGATION_PAGE_DEFAULT),
        ),
        ("CHALLENGES_PAGE", u64::from(limits::CHALLENGES_PAGE)),
        (
            "CHALLENGES_PAGE_DEFAULT",
            u64::from(limits::CHALLENGES_PAGE_DEFAULT),
        ),
        ("REPORT_PAGE", u64::from(limits::REPORT_PAGE)),
        (
            "REPORT_PAGE_DEFAULT",
            u64::from(limits::REPORT_PAGE_DEFAULT),
        ),
        ("MAX_ENDPOINT_LEN", limits::MAX_ENDPOINT_LEN as u64),
        ("MAX_ADDRESS_LEN", limits::MAX_ADDRESS_LEN as u64),
        ("MAX_DECIMAL_LEN", limits::MAX_DECIMAL_LEN as u64),
        ("MAX_LOSS_MICRO", limits::MAX_LOSS_MICRO),
        ("MAX_GAIN_MICRO", limits::MAX_GAIN_MICRO),
        ("MAX_SEATS_CAP", u64::from(limits::MAX_SEATS_CAP)),
        (
            "MAX_OBJECTIONS_PER_READY",
            limits::MAX_OBJECTIONS_PER_READY as u64,
        ),
        (
            "MAX_JOIN_EXTENSIONS",
            u64::from(limits::MAX_JOIN_EXTENSIONS),
        ),
        ("MIN_UNBONDING_EPOCHS", limits::MIN_UNBONDING_EPOCHS),
        ("MAX_MISS_WINDOW_EPOCHS", limits::MAX_MISS_WINDOW_EPOCHS),
        ("MIN_STAKE", u64::try_from(limits::MIN_STAKE).unwrap()),
        ("MAX_HELD_BITS", u64::from(limits::MAX_HELD_BITS)),
    ];
    let theirs = v.as_object().expect("an object of limits");
    for (name, value) in ours.iter() {
        assert_eq!(
            theirs.get(*name).and_then(Value::as_u64),
            Some(*value),
            "limits.rs {name} differs from protocol/rules/limits.py"
        );
    }
    let names: BTreeSet<&str> = ours.iter().map(|(n, _)| *n).collect();
    for name in theirs.keys() {
        assert!(
            names.contains(name.as_str()),
            "protocol/rules/limits.py {name} has no constant in limits.rs"
        );
    }
}

#[test]
fn vdf() {
    let v = vectors("vdf");
    for case in cases(&v, "cases") {
        let x = vdf::input_element(&unhex(str_of(&case["seed"])));
        assert_eq!(Some(&x), vdf::decode(str_of(&case["x"])).as_ref());
        let t = case["squarings"].as_u64().unwrap();
        let y = vdf::decode(str_of(&case["y"])).expect("canonical y");
        let proof = vdf::decode(str_of(&case["proof"])).expect("canonical proof");
        let ell = vdf::challenge_prime(&x, &y, t).unwrap();
        assert_eq!(ell.to_string(), str_of(&case["ell"]));
        assert!(vdf::verify(&x, t, &y, &proof));
        assert_eq!(hex(&vdf::delayed_seed(&y)), str_of(&case["delayed_seed"]));
        for bad in case["refused"].as_array().unwrap() {
            let t_bad = bad["squarings"].as_u64().unwrap();
            let parse =
                |k: &str| num_bigint::BigUint::parse_bytes(str_of(&bad[k]).as_bytes(), 16).unwrap();
            assert!(
                !vdf::verify(&x, t_bad, &parse("y"), &parse("proof")),
                "{}",
                bad["why"]
            );
            // Only canonical elements decode: the N − a spellings are refused up front.
            if str_of(&bad["why"]).contains("N -") {
                assert!(
                    vdf::decode(str_of(&bad["y"])).is_none()
                        || vdf::decode(str_of(&bad["proof"])).is_none()
                );
            }
        }
    }
    for case in cases(&v, "primes") {
        let n = num_bigint::BigUint::parse_bytes(str_of(&case["n"]).as_bytes(), 10).unwrap();
        assert_eq!(
            vdf::is_probable_prime(&n),
            case["prime"].as_bool().unwrap(),
            "{n}"
        );
    }
}

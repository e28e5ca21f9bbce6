//! Stake: bond, unbond, claim.
//!
//! A member's stake is `bonded` plus its unbonding entries. Unbonding moves stake out of
//! `bonded` into an entry released at `current_epoch + unbonding_epochs`; until it is claimed it
//! stays in the member record, so slashing (epoch logic) can still reach it.

use crate::deps::{DepsMut, Storage};
use crate::error::{refuse, ContractError};
use crate::funds::{bank_send, must_pay, nonpayable};
use crate::limits::MAX_ENDPOINT_LEN;
use crate::state::{self, Config, Member, Role, Totals, UnbondingEntry, TOTALS};
use crate::types::{Event, MessageInfo, Response, Uint128};

/// An endpoint is an http(s) URL: printable ASCII, a host (DNS name, dotted IPv4 or bracketed
/// IPv6), an optional port 1-65535 and an optional path; no user info, query, fragment or
/// backslash. The same rules as `protocol/rules/endpoints.py` (`endpoint_syntax`), kept equal by
/// `tests/vectors/endpoints.json`; readers check reachability themselves.
pub fn validate_endpoint(endpoint: &str) -> Result<(), ContractError> {
    let invalid = |reason: String| Err(ContractError::InvalidEndpoint(reason));
    if endpoint.len() > MAX_ENDPOINT_LEN {
        return invalid(format!(
            "endpoint is {} bytes, longer than {MAX_ENDPOINT_LEN}",
            endpoint.len()
        ));
    }
    if !endpoint.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return invalid(format!(
            "endpoint {endpoint:?} must be printable ASCII without spaces"
        ));
    }
    let rest = match endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
    {
        Some(rest) => rest,
        None => {
            return invalid(format!(
                "endpoint {endpoint:?} must be an http:// or https:// URL"
            ))
        }
    };
    if rest.bytes().any(|b| b"@?#\\".contains(&b)) {
        return invalid(format!(
            "endpoint {endpoint:?} must have no user info, query, fragment or backslash"
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if !path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._~!$&'()*+,;=:%-".contains(&b))
    {
        return invalid(format!(
            "endpoint {endpoint:?} has a path a URL cannot have"
        ));
    }
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => (&authority[..=i], &authority[i + 1..]),
            None => (authority, ""),
        }
    } else {
        match authority.find(':') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        }
    };
    if !port.is_empty() {
        let digits = &port[1..];
        let ok = port.starts_with(':')
            && (1..=5).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && matches!(digits.parse::<u32>(), Ok(p) if (1..=65535).contains(&p));
        if !ok {
            return invalid(format!("endpoint {endpoint:?}: the port must be 1-65535"));
        }
    }
    if !valid_host(host) {
        return invalid(format!("endpoint {endpoint:?} has no valid host"));
    }
    Ok(())
}

/// A DNS name, dotted-decimal IPv4 (no leading zeros) or a bracketed IPv6 address (no zone).
fn valid_host(host: &str) -> bool {
    if let Some(inner) = host.strip_prefix('[') {
        return match inner.strip_suffix(']') {
            Some(addr) => !addr.contains('%') && addr.parse::<std::net::Ipv6Addr>().is_ok(),
            None => false,
        };
    }
    let ipv4_shaped = host.split('.').count() == 4
        && host
            .split('.')
            .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()));
    if ipv4_shaped {
        return host.split('.').all(|p| {
            matches!(p.parse::<u32>(), Ok(v) if v <= 255) && (p == "0" || !p.starts_with('0'))
        });
    }
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let last_numeric = labels
        .last()
        .map_or(true, |l| l.bytes().all(|b| b.is_ascii_digit()));
    !host.is_empty() && host.len() <= 253 && labels.iter().all(label_ok) && !last_numeric
}

/// The sender's member record (`action` names the message in the refusal).
fn sender_member(
    storage: &dyn Storage,
    info: &MessageInfo,
    action: &'static str,
) -> Result<Member, ContractError> {
    match state::load_member(storage, &info.sender)? {
        Some(member) => Ok(member),
        None => refuse!(action, "{} is not a member", info.sender),
    }
}

/// The `wasm-stake` event every stake change emits, for indexers.
fn stake_event(action: &str, member: &Member, amount: Uint128) -> Event {
    Event::new("stake")
        .add_attribute("action", action)
        .add_attribute("member", &member.address)
        .add_attribute("role", member.role.as_str())
        .add_attribute("amount", amount)
        .add_attribute("bonded", member.bonded)
}

pub fn bond(
    deps: DepsMut,
    config: &Config,
    info: &MessageInfo,
    role: Role,
    endpoint: String,
) -> Result<Response, ContractError> {
    let amount = must_pay(info, &config.denom, "bond")?;
    validate_endpoint(&endpoint).map_err(|e| e.context("bond"))?;
    let existing = state::load_member(deps.storage, &info.sender)?;
    let mut member = match existing {
        Some(member) if member.role != role => refuse!(
            "bond",
            "{} is bonded as {}; a member's role cannot change to {}",
            info.sender,
            member.role.as_str(),
            role.as_str()
        ),
        Some(member) => member,
        None => Member {
            address: info.sender.clone(),
            role,
            endpoint: endpoint.clone(),
            bonded: Uint128::zero(),
            unbonding: Vec::new(),
            last_miss: None,
            earlier_misses: 0,
        },
    };
    TOTALS.load(deps.storage)?.admit(amount, "bond")?;
    let before = member.bonded;
    member.bonded = member.bonded.checked_add(amount)?;
    member.endpoint = endpoint;
    state::update_eligibility(deps.storage, config, role, before, member.bonded)?;
    let mut totals = TOTALS.load(deps.storage)?;
    totals.bonded = totals.bonded.checked_add(amount)?;
    state::save_member(deps.storage, &member);
    TOTALS.save(deps.storage, &totals);
    Ok(Response::new()
        .add_attribute("action", "bond")
        .add_attribute("member", &member.address)
        .add_attribute("role", role.as_str())
        .add_attribute("amount", amount)
        .add_attribute("bonded", member.bonded)
        .add_event(stake_event("bond", &member, amount)))
}

pub fn unbond(
    deps: DepsMut,
    config: &Config,
    info: &MessageInfo,
    amount: Uint128,
) -> Result<Response, ContractError> {
    const ACTION: &str = "unbond";
    nonpayable(info, ACTION)?;
    if amount.is_zero() {
        refuse!(ACTION, "amount must be nonzero");
    }
    let mut member = sender_member(deps.storage, info, ACTION)?;
    if amount > member.bonded {
        refuse!(
            ACTION,
            "cannot unbond {}{}, only {}{} is bonded",
            amount,
            config.denom,
            member.bonded,
            config.denom
        );
    }
    let release_epoch = state::current_epoch(deps.storage)?
        .checked_add(config.economics.unbonding_epochs)
        .ok_or(ContractError::CounterOverflow(
            "unbond: release epoch overflows",
        ))?;
    let before = member.bonded;
    member.bonded = member.bonded.checked_sub(amount)?;
    state::update_eligibility(deps.storage, config, member.role, before, member.bonded)?;
    // Entries stay ordered by release epoch; one entry per epoch.
    match member
        .unbonding
        .iter_mut()
        .find(|e| e.release_epoch == release_epoch)
    {
        Some(entry) => entry.amount = entry.amount.checked_add(amount)?,
        None => member.unbonding.push(UnbondingEntry {
            amount,
            release_epoch,
        }),
    }
    let mut totals = TOTALS.load(deps.storage)?;
    totals.bonded = totals.bonded.checked_sub(amount)?;
    totals.unbonding = totals.unbonding.checked_add(amount)?;
    state::save_member(deps.storage, &member);
    TOTALS.save(deps.storage, &totals);
    Ok(Response::new()
        .add_attribute("action", "unbond")
        .add_attribute("member", &member.address)
        .add_attribute("amount", amount)
        .add_attribute("release_epoch", release_epoch)
        .add_event(
            stake_event("unbond", &member, amount).add_attribute("release_epoch", release_epoch),
        ))
}

/// `set_standby`: a member names (or, with None, clears) the one address that may send its beacon
/// reveal. The standby holds no stake when named (a member cannot be one, nor its own), and the
/// contract lets it do nothing for the member but `reveal` (docs/contract.md, "A standby revealer").
pub fn set_standby(
    deps: DepsMut,
    info: &MessageInfo,
    standby: Option<String>,
) -> Result<Response, ContractError> {
    const ACTION: &str = "set_standby";
    nonpayable(info, ACTION)?;
    let member = sender_member(deps.storage, info, ACTION)?;
    match &standby {
        None => state::STANDBYS.remove(deps.storage, &member.address),
        Some(address) => {
            deps.api
                .addr_validate(address)
                .map_err(|e| e.context("set_standby: standby"))?;
            if *address == member.address {
                refuse!(ACTION, "{address} cannot be its own standby");
            }
            if state::load_member(deps.storage, address)?.is_some() {
                refuse!(
                    ACTION,
                    "{address} is a member: a standby holds no stake of its own"
                );
            }
            state::STANDBYS.save(deps.storage, &member.address, address);
        }
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("member", &member.address)
        .add_attribute("standby", standby.as_deref().unwrap_or("")))
}

pub fn claim(
    deps: DepsMut,
    config: &Config,
    info: &MessageInfo,
) -> Result<Response, ContractError> {
    const ACTION: &str = "claim";
    nonpayable(info, ACTION)?;
    let mut member = sender_member(deps.storage, info, ACTION)?;
    // Against the oldest unsettled epoch: with two epochs in flight, a stake unbonded while the
    // older one settles stays slashable until it has settled.
    let epoch = state::unsettled_epoch(deps.storage)?;
    let amount = member.claimable(epoch)?;
    if amount.is_zero() {
        match member.unbonding.iter().map(|e| e.release_epoch).min() {
            Some(next) => refuse!(
                ACTION,
                "nothing to claim at epoch {epoch}; the next release is at epoch {next}"
            ),
            None => refuse!(
                ACTION,
                "nothing to claim; {} has no unbonding stake",
                info.sender
            ),
        }
    }
    member.unbonding.retain(|e| e.release_epoch > epoch);
    let mut totals = TOTALS.load(deps.storage)?;
    totals.unbonding = totals.unbonding.checked_sub(amount)?;
    state::save_member(deps.storage, &member);
    TOTALS.save(deps.storage, &totals);
    Ok(Response::new()
        .add_message(bank_send(&member.address, &config.denom, amount))
        .add_attribute("action", "claim")
        .add_attribute("member", &member.address)
        .add_attribute("amount", amount)
        .add_event(stake_event("claim", &member, amount)))
}

/// Slash `stake × bps / 10000` of `member`'s total stake (bonded plus unbonding): from bonded
/// first, then from unbonding entries, latest release first. Updates `totals` to match; returns
/// the amount taken (the caller pays it out and adds it to the member's lifetime totals).
pub fn slash(member: &mut Member, bps: u16, totals: &mut Totals) -> Result<Uint128, ContractError> {
    let amount = member.at_risk()?.mul_bps(bps);
    take(member, amount, totals)?;
    Ok(amount)
}

/// Take up to `amount` of a member's stake, bonded first, then the unbonding entries released
/// last; returns what was taken (less than `amount` only when the member holds less). The caller
/// puts it somewhere on the books (a bank send, the reward pool).
pub fn take(
    member: &mut Member,
    amount: Uint128,
    totals: &mut Totals,
) -> Result<Uint128, ContractError> {
    let from_bonded = amount.min(member.bonded);
    member.bonded = member.bonded.checked_sub(from_bonded)?;
    totals.bonded = totals.bonded.checked_sub(from_bonded)?;
    let mut left = amount.checked_sub(from_bonded)?;
    member.unbonding.sort_by_key(|e| e.release_epoch);
    for entry in member.unbonding.iter_mut().rev() {
        if left.is_zero() {
            break;
        }
        let take = left.min(entry.amount);
        entry.amount = entry.amount.checked_sub(take)?;
        totals.unbonding = totals.unbonding.checked_sub(take)?;
        left = left.checked_sub(take)?;
    }
    member.unbonding.retain(|e| !e.amount.is_zero());
    amount.checked_sub(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MISS_HISTORY;

    fn member(bonded: u128, unbonding: &[(u128, u64)]) -> Member {
        Member {
            address: "inj1x".into(),
            role: Role::Host,
            endpoint: "http://x".into(),
            bonded: Uint128(bonded),
            unbonding: unbonding
                .iter()
                .map(|(a, r)| UnbondingEntry {
                    amount: Uint128(*a),
                    release_epoch: *r,
                })
                .collect(),
            last_miss: None,
            earlier_misses: 0,
        }
    }

    #[test]
    fn a_member_stored_before_sat_out_reads_as_never_having_sat_out_and_is_stored_unchanged() {
        // The record as a build before the sit-out rank stored it (state compatibility).
        let old = r#"{"role":"host","endpoint":"http://x","bonded":"7","unbonding":[]}"#;
        let read: Member = serde_json::from_str(old).unwrap();
        assert_eq!((read.last_miss, read.earlier_misses), (None, 0));
        assert_eq!(serde_json::to_string(&read).unwrap(), old);
        let mut sat = read;
        sat.record_miss(3);
        let stored = serde_json::to_string(&sat).unwrap();
        assert!(
            stored.ends_with(r#""unbonding":[],"sat_out":3}"#),
            "{stored}"
        );
    }

    #[test]
    fn a_member_stored_by_the_sit_out_build_reads_as_one_miss_and_is_stored_unchanged() {
        let old =
            r#"{"role":"host","endpoint":"http://x","bonded":"7","unbonding":[],"sat_out":4}"#;
        let read: Member = serde_json::from_str(old).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), old);
        assert_eq!(read.misses_before(5, 1), 1);
        assert_eq!(read.misses_before(5, 8), 1);
        assert_eq!(
            read.misses_before(4, 8),
            0,
            "a miss counts from the next epoch on"
        );
        assert_eq!(read.misses_before(13, 8), 0, "out of the window");
        assert_eq!(read.misses_before(12, 8), 1);
        // A second miss adds the history word.
        let mut again = read;
        again.record_miss(6);
        let stored = serde_json::to_string(&again).unwrap();
        assert!(stored.ends_with(r#""sat_out":6,"mb":2}"#), "{stored}");
        let back: Member = serde_json::from_str(&stored).unwrap();
        assert_eq!(back.misses_before(7, 8), 2);
        assert_eq!(back.misses_before(7, 1), 1);
    }

    #[test]
    fn misses_are_counted_exactly_in_any_window_and_any_order() {
        // Against a plain set of epochs: every window up to the longest, misses recorded in
        // order, out of order, twice, and spread wider than the history.
        let patterns: [&[u64]; 5] = [
            &[0, 1, 2, 3],
            &[10, 3, 7, 7, 70, 69, 5],
            &[100, 36, 37, 99, 163, 164],
            &[1, 200, 201, 202, 400],
            &[64, 0, 128, 127, 63],
        ];
        for pattern in patterns {
            let mut m = member(1, &[]);
            let mut seen: Vec<u64> = Vec::new();
            for &e in pattern {
                m.record_miss(e);
                seen.push(e);
                let last = *seen.iter().max().unwrap();
                for epoch in last + 1..last + 70 {
                    for window in 1..=MISS_HISTORY {
                        let want = seen
                            .iter()
                            .copied()
                            .collect::<std::collections::BTreeSet<u64>>()
                            .into_iter()
                            .filter(|&x| x + window >= epoch && x < epoch)
                            .filter(|&x| x + MISS_HISTORY >= last)
                            .count() as u32;
                        assert_eq!(
                            m.misses_before(epoch, window),
                            want,
                            "{pattern:?} at {epoch}, window {window}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn inflows_past_the_held_limit_are_refused_and_finalize_sums_fit() {
        use crate::limits::{MAX_HELD, MAX_PARTICIPANTS};
        let totals = Totals {
            bonded: Uint128(MAX_HELD - 10),
            unbonding: Uint128(5),
            reward_pool: Uint128(5),
        };
        assert!(totals.admit(Uint128(0), "bond").is_ok());
        let err = totals.admit(Uint128(1), "bond").unwrap_err().to_string();
        assert_eq!(
            err,
            "bond: the contract would hold more than 2^96 base units"
        );
        assert!(totals.admit(Uint128(u128::MAX), "fund_rewards").is_err());
        // Everything finalize computes is bounded by what is held: a sum over every member of
        // every epoch's stakes, a share times a count of participants, fits with room to spare.
        let held = Uint128(MAX_HELD);
        assert!(held.checked_mul(u128::from(MAX_PARTICIPANTS) * 2).is_ok());
        assert!(held.checked_mul(1u128 << 31).is_ok());
        assert_eq!(held.mul_bps(10_000), held);
    }

    #[test]
    fn slash_takes_bonded_first_then_latest_unbonding() {
        let mut m = member(100, &[(300, 2), (600, 5)]);
        let mut totals = Totals {
            bonded: Uint128(100),
            unbonding: Uint128(900),
            reward_pool: Uint128::zero(),
        };
        // 50 % of 1000 = 500: 100 bonded, then 400 of the entry released at 5.
        assert_eq!(slash(&mut m, 5_000, &mut totals).unwrap(), Uint128(500));
        assert_eq!(m.bonded, Uint128::zero());
        assert_eq!(
            m.unbonding,
            vec![
                UnbondingEntry {
                    amount: Uint128(300),
                    release_epoch: 2
                },
                UnbondingEntry {
                    amount: Uint128(200),
                    release_epoch: 5
                }
            ]
        );
        assert_eq!(
            (totals.bonded, totals.unbonding),
            (Uint128(0), Uint128(500))
        );
        // 100 % empties the entries.
        assert_eq!(slash(&mut m, 10_000, &mut totals).unwrap(), Uint128(500));
        assert!(m.unbonding.is_empty());
        assert_eq!(totals.unbonding, Uint128::zero());
    }

    #[test]
    fn mul_bps_is_exact_floor() {
        assert_eq!(Uint128(9_999).mul_bps(5_000), Uint128(4_999));
        assert_eq!(Uint128(u128::MAX).mul_bps(10_000), Uint128(u128::MAX));
        assert_eq!(Uint128(u128::MAX).mul_bps(1), Uint128(u128::MAX / 10_000));
        assert_eq!(Uint128(3).mul_bps(3_333), Uint128(0));
    }
}

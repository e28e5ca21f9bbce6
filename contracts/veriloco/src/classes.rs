//! Compute-profile classes (`docs/contract.md`, "Compute-profile classes"), byte for byte as
//! `protocol/rules/classes.py`; `tests/vectors/classes.json` pins both sides.
//!
//! Honest replays are bitwise equal only within one compute profile (the torch build, the CPU
//! kernels, MKL's mode, the device), so a member declares its class when it joins: the 64 hex
//! characters of its compute fingerprint, or "" (the class of every member that declares none).
//! A host's pickers are drawn from the joined validators of its own class, and a dispute of its
//! challenges is decided by the stake of V's members of its class (its **electorate**). A class
//! is **served** in an epoch when at least `max(1, min_validators)` of its validators joined —
//! the bar the run sets for any epoch, applied per class; a host of a class that is not served is
//! challenged by nobody and decided by nobody, so it ends `excluded` (no slash, no reward, its Δ
//! not aggregated).

use crate::error::ContractError;

/// Length of a declared class: the compute fingerprint, 64 lowercase hex characters.
pub const CLASS_LEN: usize = 64;

/// A declared class must be "" or 64 lowercase hex characters.
pub fn validate(action: &'static str, class: &str) -> Result<(), ContractError> {
    let hex = class.len() == CLASS_LEN
        && class
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if class.is_empty() || hex {
        return Ok(());
    }
    Err(ContractError::refused(
        action,
        format!(
            "compute_class must be empty or {CLASS_LEN} lowercase hex characters (a compute \
             fingerprint)"
        ),
    ))
}

/// The validators (address, stake) of `class` among `validators`, whose classes are `classes`
/// in the same order (a missing class is ""), order kept.
pub fn of_class(
    validators: &[(String, u128)],
    classes: &[String],
    class: &str,
) -> Vec<(String, u128)> {
    validators
        .iter()
        .enumerate()
        .filter(|(i, _)| classes.get(*i).map_or("", |c| c.as_str()) == class)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Whether a class whose `joined` validators joined the epoch is served: at least
/// `max(1, min_validators)` of them.
pub fn served(joined: usize, min_validators: u32) -> bool {
    joined >= min_validators.max(1) as usize
}

/// The electorate of a host of `class`: the indices into V (whose classes are `v_classes`, in
/// V's order) of V's members of `class`; None when every member of V is of it (all of V votes,
/// as in a run of one class).
pub fn electorate(v_classes: &[String], class: &str) -> Option<Vec<u16>> {
    if v_classes.iter().all(|c| c == class) {
        return None;
    }
    Some(
        v_classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.as_str() == class)
            .map(|(i, _)| i as u16)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn classes_are_empty_or_a_fingerprint() {
        assert!(validate("join", "").is_ok());
        assert!(validate("join", &"0a".repeat(32)).is_ok());
        for bad in [
            "A".repeat(64),
            "0".repeat(63),
            "0".repeat(65),
            "g".repeat(64),
        ] {
            assert!(validate("join", &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_class_is_served_from_the_runs_own_minimum() {
        assert!(!served(0, 0));
        assert!(served(1, 0));
        assert!(!served(2, 3));
        assert!(served(3, 3));
    }

    #[test]
    fn the_electorate_is_v_of_the_class_or_all_of_v() {
        assert_eq!(electorate(&s(&["a", "a"]), "a"), None);
        assert_eq!(electorate(&s(&[]), "a"), None);
        assert_eq!(electorate(&s(&["a", "b", "a"]), "a"), Some(vec![0, 2]));
        assert_eq!(electorate(&s(&["a", "b"]), "c"), Some(vec![]));
        let v = vec![("x".to_string(), 5u128), ("y".to_string(), 7u128)];
        assert_eq!(of_class(&v, &s(&["b"]), ""), vec![("y".to_string(), 7)]);
    }
}

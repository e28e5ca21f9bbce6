//! Upgrades: the `migrate` entry point (`docs/chain.md`, "Upgrades").
//!
//! *Who* may migrate is the chain's decision, not the contract's: wasmd calls `migrate` only in a
//! `MsgMigrateContract` from the admin set by `MsgInstantiateContract` (or from the chain's
//! governance), and a contract instantiated without an admin cannot be migrated by anyone else.
//! `migrate` gets no `MessageInfo`, so the contract never learns who sent it.
//!
//! *What* may be migrated is checked here, against cw2's record (`contract_info`: name and
//! version, written at instantiation and by every migration):
//!
//! * the stored name must be this contract's (`veriloco`): another contract's state is refused;
//! * the stored version, `MAJOR.MINOR.PATCH`, must not be newer than this build's: a downgrade is
//!   refused, the same version runs again as a no-op (it only rewrites the record), a newer one
//!   runs the state migrations of the versions in between;
//! * a run instantiated before the record existed has none: it counts as [`LEGACY_VERSION`].
//!
//! A migration never changes stakes, balances, the reward pool, the run spec, its hash or the
//! epoch; state migrations only rewrite the layout of what is stored (there are none yet).

use serde::Deserialize;

use crate::deps::{DepsMut, Storage};
use crate::error::ContractError;
use crate::state::{ContractVersion, CONFIG, CONTRACT_INFO};
use crate::types::{Env, Response};

/// The name cw2's record carries for this contract.
pub const CONTRACT_NAME: &str = env!("CARGO_PKG_NAME");
/// This build's version (`Cargo.toml`); every change that needs a migration raises it.
pub const CONTRACT_VERSION: &str = env!("CARGO_PKG_VERSION");
/// What a run stored by code older than the version record counts as (all such builds were 0.1.0).
pub const LEGACY_VERSION: &str = "0.1.0";

const ACTION: &str = "migrate";

/// The migrate message: `{}` (unknown fields are refused).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct MigrateMsg {}

/// `MAJOR.MINOR.PATCH` with decimal parts (no pre-release or build suffix), comparable as a tuple.
pub fn parse_version(text: &str) -> Option<[u64; 3]> {
    let mut parts = text.split('.');
    let mut out = [0u64; 3];
    for part in out.iter_mut() {
        let digits = parts.next()?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *part = digits.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Refuse to migrate from `stored` to this build (`to`): another contract, an unreadable
/// version, or a newer one than `to` (a downgrade).
pub fn check_upgrade(stored: &ContractVersion, to: &str) -> Result<(), ContractError> {
    if stored.contract != CONTRACT_NAME {
        return Err(ContractError::refused(
            ACTION,
            format!(
                "cannot migrate contract {:?} to {CONTRACT_NAME}",
                stored.contract
            ),
        ));
    }
    let unreadable =
        |v: &str| ContractError::refused(ACTION, format!("version {v:?} is not MAJOR.MINOR.PATCH"));
    let from = parse_version(&stored.version).ok_or_else(|| unreadable(&stored.version))?;
    let target = parse_version(to).ok_or_else(|| unreadable(to))?;
    if from > target {
        return Err(ContractError::refused(
            ACTION,
            format!(
                "cannot downgrade {CONTRACT_NAME} from version {} to {to}",
                stored.version
            ),
        ));
    }
    Ok(())
}

/// The version record of the contract's state: cw2's record, or [`LEGACY_VERSION`] for a run
/// stored before the record existed (it has a config). Refuses state that is neither.
fn stored_version(storage: &dyn Storage) -> Result<ContractVersion, ContractError> {
    if let Some(version) = CONTRACT_INFO.may_load(storage)? {
        return Ok(version);
    }
    if CONFIG.may_load(storage)?.is_none() {
        return Err(ContractError::refused(
            ACTION,
            "the contract's storage holds no veriloco run",
        ));
    }
    Ok(ContractVersion {
        contract: CONTRACT_NAME.to_string(),
        version: LEGACY_VERSION.to_string(),
    })
}

/// The `migrate` entry point: check the stored name and version, run the state migrations from
/// the stored version (none yet), record this build's version.
pub fn migrate(deps: DepsMut, _env: Env, _msg: MigrateMsg) -> Result<Response, ContractError> {
    let from = stored_version(deps.storage)?;
    check_upgrade(&from, CONTRACT_VERSION)?;
    // State migrations go here, each guarded by the version it upgrades from; none so far (the
    // layout of 0.1.0 is that of this build).
    CONTRACT_INFO.save(deps.storage, &ContractVersion::this());
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("contract", CONTRACT_NAME)
        .add_attribute("from_version", &from.version)
        .add_attribute("to_version", CONTRACT_VERSION))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract;
    use crate::hashing::hex;
    use crate::msg::parse_json;
    use crate::testing::MockDeps;

    fn version(contract: &str, version: &str) -> ContractVersion {
        ContractVersion {
            contract: contract.to_string(),
            version: version.to_string(),
        }
    }

    fn env() -> Env {
        serde_json::from_value(json!({
            "block": {"height": 10, "time": "10000000000", "chain_id": "test-1"},
            "transaction": {"index": 0},
            "contract": {"address": "contract"},
        }))
        .unwrap()
    }

    /// A run instantiated on the native store.
    fn instantiated() -> MockDeps {
        let mut deps = MockDeps::default();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/spec.json");
        let vector: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let msg = json!({"spec_json": vector["spec_json"], "initial_model_hash": hex(&[0u8; 32]),
                         "denom": "inj", "treasury": deps.api.addr("treasury")});
        let info = serde_json::from_value(json!({"sender": "operator", "funds": []})).unwrap();
        let msg = parse_json("message", msg.to_string().as_bytes()).unwrap();
        contract::instantiate(deps.as_mut(), env(), info, msg).unwrap();
        deps
    }

    fn run(deps: &mut MockDeps) -> Result<Response, ContractError> {
        migrate(deps.as_mut(), env(), MigrateMsg {})
    }

    #[test]
    fn versions_parse_as_three_numbers() {
        assert_eq!(parse_version("0.1.0"), Some([0, 1, 0]));
        assert_eq!(parse_version("12.0.345"), Some([12, 0, 345]));
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "1.2.x",
            "1..3",
            "1.2.3-rc1",
            "+1.2.3",
            " 1.2.3",
        ] {
            assert_eq!(parse_version(bad), None, "{bad:?}");
        }
        assert!(parse_version(CONTRACT_VERSION).is_some());
        assert!(parse_version("0.10.0") > parse_version("0.9.9"));
    }

    #[test]
    fn the_version_check_refuses_other_contracts_and_downgrades() {
        assert!(check_upgrade(&version(CONTRACT_NAME, "0.1.0"), "0.2.0").is_ok());
        assert!(check_upgrade(&version(CONTRACT_NAME, "0.2.0"), "0.2.0").is_ok());
        assert!(check_upgrade(&version(CONTRACT_NAME, "0.9.9"), "0.10.0").is_ok());
        assert_eq!(
            check_upgrade(&version(CONTRACT_NAME, "0.2.1"), "0.2.0")
                .unwrap_err()
                .to_string(),
            "migrate: cannot downgrade veriloco from version 0.2.1 to 0.2.0"
        );
        assert_eq!(
            check_upgrade(&version("cw20-base", "0.1.0"), "0.2.0")
                .unwrap_err()
                .to_string(),
            "migrate: cannot migrate contract \"cw20-base\" to veriloco"
        );
        assert_eq!(
            check_upgrade(&version(CONTRACT_NAME, "1.0"), "0.2.0")
                .unwrap_err()
                .to_string(),
            "migrate: version \"1.0\" is not MAJOR.MINOR.PATCH"
        );
    }

    #[test]
    fn migrate_records_the_version_and_changes_nothing_else() {
        let mut deps = instantiated();
        let old = version(CONTRACT_NAME, LEGACY_VERSION);
        CONTRACT_INFO.save(&mut deps.storage, &old);
        let before = deps.storage.clone();
        let response = run(&mut deps).unwrap();
        let attrs: Vec<(&str, &str)> = response
            .attributes
            .iter()
            .map(|a| (a.key.as_str(), a.value.as_str()))
            .collect();
        assert_eq!(
            attrs,
            [
                ("action", "migrate"),
                ("contract", CONTRACT_NAME),
                ("from_version", LEGACY_VERSION),
                ("to_version", CONTRACT_VERSION)
            ]
        );
        let stored = CONTRACT_INFO.load(&deps.storage).unwrap();
        assert_eq!(
            (stored.contract.as_str(), stored.version.as_str()),
            (CONTRACT_NAME, CONTRACT_VERSION)
        );
        // Only the version record differs.
        let mut restored = deps.storage.clone();
        CONTRACT_INFO.save(&mut restored, &old);
        assert_eq!(restored, before);
        // The same version again: allowed, and it changes nothing.
        let again = deps.storage.clone();
        run(&mut deps).unwrap();
        assert_eq!(deps.storage, again);
    }

    #[test]
    fn a_run_without_a_version_record_migrates_as_the_legacy_version() {
        let mut deps = instantiated();
        deps.storage.remove(b"contract_info");
        let response = run(&mut deps).unwrap();
        assert!(response
            .attributes
            .iter()
            .any(|a| a.key == "from_version" && a.value == LEGACY_VERSION));
        assert_eq!(
            CONTRACT_INFO.load(&deps.storage).unwrap().version,
            CONTRACT_VERSION
        );
    }

    #[test]
    fn migrate_refuses_what_it_cannot_upgrade() {
        let mut empty = MockDeps::default();
        assert_eq!(
            run(&mut empty).unwrap_err().to_string(),
            "migrate: the contract's storage holds no veriloco run"
        );
        let mut deps = instantiated();
        CONTRACT_INFO.save(&mut deps.storage, &version(CONTRACT_NAME, "999.0.0"));
        let before = deps.storage.clone();
        assert!(run(&mut deps)
            .unwrap_err()
            .to_string()
            .starts_with("migrate: cannot downgrade veriloco from version 999.0.0"));
        CONTRACT_INFO.save(&mut deps.storage, &version("other", CONTRACT_VERSION));
        assert!(run(&mut deps)
            .unwrap_err()
            .to_string()
            .starts_with("migrate: cannot migrate contract \"other\""));
        CONTRACT_INFO.save(&mut deps.storage, &version(CONTRACT_NAME, "999.0.0"));
        assert_eq!(deps.storage, before);
    }
}

//! The contract's messages and query answers: its public JSON interface.
//!
//! Messages are externally tagged, snake_case (`{"bond": {"role": "host", "endpoint": "..."}}`),
//! unknown fields are errors (a typo must not be silently ignored), amounts are decimal strings.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ContractError;
use crate::records::{ChallengeOutcome, VoteOutcome};
use crate::state::{MemberView, Role};
use crate::types::Uint128;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct InstantiateMsg {
    /// The run spec as canonical JSON text; its tagged hash is the run id.
    pub spec_json: String,
    /// θ_0, 64 lowercase hex.
    pub initial_model_hash: String,
    /// Must equal `economics.denom` of the spec.
    pub denom: String,
    pub treasury: String,
    /// The chain admin the deployer gives `MsgInstantiateContract` too (recorded for display;
    /// None: an immutable run).
    #[serde(default)]
    pub admin: Option<String>,
    /// The most records one execute processes of a paged close (default
    /// `state::DEFAULT_SETTLE_PAGE`); at least 1.
    #[serde(default)]
    pub settle_page: Option<u32>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ExecuteMsg {
    /// Stake the attached funds as `role` and set the endpoint.
    Bond { role: Role, endpoint: String },
    /// Start unbonding `amount` of bonded stake.
    Unbond { amount: Uint128 },
    /// Pay out every unbonding entry that has been released.
    Claim {},
    /// Name the sender's standby revealer (None: none): an address that holds no stake and may
    /// send `reveal` for this member, and nothing else for it (docs/contract.md, "A standby revealer").
    SetStandby {
        #[serde(default)]
        standby: Option<String>,
    },
    /// Add the attached funds to the reward pool.
    FundRewards {},
    /// Join `epoch` (in its join phase) with a beacon commitment, declaring the member's
    /// compute-profile class ("" or its 64-hex compute fingerprint; `crate::classes`).
    Join {
        epoch: u64,
        beacon_commit: String,
        #[serde(default)]
        compute_class: String,
    },
    /// A host's commitment to its epoch of work and to its trap set (train phase).
    Commit {
        epoch: u64,
        checkpoint_root: String,
        delta_hash: String,
        loss_digest: String,
        segments: u32,
        train_loss_micro: u64,
        trap_commit: String,
    },
    /// A joined host that will finish no segment by the train deadline says so instead of
    /// committing (train phase): it is `sat_out` — not challenged, paid or slashed for the epoch.
    SitOut { epoch: u64 },
    /// Reveal the beacon secret (reveal phase): the sender's own, or, from the standby a
    /// member named (`set_standby`), that member's (`participant`).
    Reveal {
        epoch: u64,
        secret: String,
        #[serde(default)]
        participant: Option<String>,
    },
    /// A validator's commitment to its verdict on one challenged segment (verify, dispute).
    CommitVerdict {
        epoch: u64,
        host: String,
        segment: u32,
        commitment: String,
    },
    /// A validator with round-0 seats is done with them (objection): the challenges it objects
    /// to (its committed verdict is not `pass`), strictly ascending by (host, segment).
    Ready {
        epoch: u64,
        #[serde(default)]
        objections: Vec<Objection>,
    },
    /// The opening of that commitment (verdict_reveal, dispute_reveal).
    RevealVerdict {
        epoch: u64,
        host: String,
        segment: u32,
        outcome: VoteOutcome,
        distance: String,
        evidence: String,
        salt: String,
        /// The host's probe gain in micro-nats: required on a pass on the host's last segment
        /// when `verification.probe_windows > 0`, allowed on a fail there, refused elsewhere;
        /// at most `MAX_GAIN_MICRO` in magnitude.
        #[serde(default)]
        gain_micro: Option<i64>,
        /// The host's probe gain on its dispute windows: required on a `pass` that decides a
        /// gain dispute (a round-0 seat's re-vote, a final vote), allowed with a `gain_micro` on
        /// a `fail` there, refused everywhere else; at most `MAX_GAIN_MICRO` in magnitude.
        #[serde(default)]
        dispute_gain_micro: Option<i64>,
    },
    /// A host's opening of its trap commitment (objection).
    RevealTraps {
        epoch: u64,
        segments: Vec<u32>,
        salt: String,
    },
    /// An accepted host's hash of θ_{e+1} (propose phase), and the accepted hosts whose Δ no
    /// holder served it, left out of that θ_{e+1} (sorted, distinct; may be omitted when none).
    ProposeModel {
        epoch: u64,
        model_hash: String,
        val_loss_micro: u64,
        #[serde(default)]
        excluded: Vec<String>,
    },
    /// Pipelined runs: a host that committed in `epoch` proposes the optimistic θ_{epoch+1}
    /// (every committed Δ aggregated), once the epoch's reveal closed; epoch + 1 opens from the
    /// hash backed by more than 2/3 of the committed stake.
    ProposeStart { epoch: u64, model_hash: String },
    /// With `verification.delay_squarings` > 0, phase `delay` (anyone): the VDF output over the
    /// epoch seed and its proof, 512 lowercase hex characters each (`crate::vdf`).
    DelayedSeed {
        epoch: u64,
        output: String,
        proof: String,
    },
    /// Close every phase that is due; fails if nothing is.
    Advance {},
}

/// One objection of a `ready`: a challenge the sender sits on in round 0 and committed to.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Objection {
    pub host: String,
    pub segment: u32,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum QueryMsg {
    Config {},
    Member {
        address: String,
    },
    /// The standby revealer `member` named with `set_standby` (`standby: null` when none).
    Standby {
        member: String,
    },
    Members {
        #[serde(default)]
        role: Option<Role>,
        #[serde(default)]
        start_after: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
    },
    Accounting {},
    /// One epoch (the current one when `epoch` is omitted). `lists: false` (0.3.2 onwards)
    /// answers the header only, without the four address lists: a few point reads whatever
    /// the number of participants. `counts: true` (0.3.4 onwards) adds the lists' lengths
    /// (`counts`, one more point read): opt-in, so a node from before 0.3.4, which refuses
    /// unknown answer fields, reads a 0.3.4 contract unchanged.
    Epoch {
        #[serde(default)]
        epoch: Option<u64>,
        #[serde(default)]
        lists: Option<bool>,
        #[serde(default)]
        counts: Option<bool>,
    },
    /// Epochs in ascending order after `start_after` (`lists`, `counts` as for `epoch`).
    Epochs {
        #[serde(default)]
        start_after: Option<u64>,
        #[serde(default)]
        limit: Option<u32>,
        #[serde(default)]
        lists: Option<bool>,
        #[serde(default)]
        counts: Option<bool>,
    },
    /// The challenges `validator` must replay in `epoch`, from the challenged hosts after
    /// `start_after` in address order, scanning at most `limit` of them; `next` in the answer is
    /// where the next page starts (absent after the last).
    Challenges {
        epoch: u64,
        validator: String,
        #[serde(default)]
        start_after: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
    },
    /// Everything about one epoch, a page at a time: the participants after `start_after` in
    /// address order, as many as a page of `limit` units holds (`ReportPage`); `next` in the
    /// answer is where the next page starts (absent after the last). The pages assemble to
    /// `protocol.views.EpochReport`. A host too large for one page is split over pages a
    /// challenge at a time: a page that stops inside one answers `next_segment` too, and the next
    /// page resumes at that challenge with `start_after` the host and `start_segment` the segment
    /// (contract 0.3.3 onwards).
    Report {
        epoch: u64,
        #[serde(default)]
        start_after: Option<String>,
        #[serde(default)]
        start_segment: Option<u32>,
        #[serde(default)]
        limit: Option<u32>,
    },
    /// One participant's part in an epoch (the current one when `epoch` is omitted): what a node
    /// polls to know what it has done and what is due.
    Participant {
        address: String,
        #[serde(default)]
        epoch: Option<u64>,
    },
    /// A compute-profile class in an epoch (the current one when `epoch` is omitted): its
    /// validators that joined so far and whether that serves the class (`crate::classes`), and
    /// its validators in the previous epoch's V. What a host reads before it joins.
    ComputeClass {
        class: String,
        #[serde(default)]
        epoch: Option<u64>,
    },
    /// The accepted hosts of an epoch with their endpoint and Δ hash, in address order after
    /// `start_after`: what aggregation reads.
    AggregationInputs {
        epoch: u64,
        #[serde(default)]
        start_after: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
    },
}

/// Answer to `config {}` (`protocol.views.Config`).
#[derive(Serialize)]
pub struct ConfigResponse {
    pub run_id: String,
    pub spec_json: String,
    pub initial_model_hash: String,
    pub denom: String,
    pub treasury: String,
    pub admin: Option<String>,
}

/// Answer to `standby {member}` (`protocol.views.Standby`): the one address that may send
/// `reveal` for `member` (docs/contract.md, "A standby revealer"), None when it named none.
#[derive(Serialize)]
pub struct StandbyResponse {
    pub member: String,
    pub standby: Option<String>,
}

/// Answer to `members {...}`: members ordered by address.
#[derive(Serialize)]
pub struct MembersResponse {
    pub members: Vec<MemberView>,
}

/// Answer to `accounting {}` (`protocol.views.Accounting`): everything the contract holds, by
/// purpose. Their sum equals the contract's bank balance in the run's denom (more only if
/// someone sent coins to the contract outside its messages).
#[derive(Serialize)]
pub struct AccountingResponse {
    pub bonded: Uint128,
    pub unbonding: Uint128,
    pub reward_pool: Uint128,
}

/// Answer to `epoch {}` and an item of `epochs {}` (`protocol.views.EpochInfo`).
#[derive(Serialize)]
pub struct EpochInfo {
    pub epoch: u64,
    pub phase: &'static str,
    pub phase_deadline: u64,
    pub started_at: u64,
    pub model_hash: String,
    pub prev_seed: String,
    pub seed: Option<String>,
    pub next_model_hash: Option<String>,
    pub agreed: Option<bool>,
    /// The epoch's participants by role, those that committed, and the accepted hosts (after
    /// finalize); absent in a header-only answer (`lists: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validators: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub committed: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Vec<String>>,
    /// The four lists' lengths, from the epoch's counters (`counts: true`, 0.3.4 onwards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<EpochCounts>,
    /// The dispute round in progress (0: none).
    pub round: u32,
    /// Closed unplayed: the join phase ran out of extensions.
    pub abandoned: bool,
    /// The stage of a paged close in progress (`seed`, `assign`, `salts`, `decide`,
    /// `outcomes`, `slashes`, `rewards`), None when no close runs.
    pub closing: Option<&'static str>,
    /// Pipelined runs: the optimistic θ_{e+1} epoch e + 1 opened from while e settles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_model_hash: Option<String>,
    /// Pipelined runs, an epoch opened from an optimistic start: the settled θ_e, once its
    /// predecessor closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled_start: Option<String>,
    /// `epoch {}` of a pipelined run: the older epoch still settling, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settling: Option<u64>,
    /// With `verification.delay_squarings` > 0: `H("vdf/seed", y)` once the VDF output `y`
    /// over `seed` was posted (phase `delay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_seed: Option<String>,
}

/// How many hosts and validators joined an epoch, committed, and were accepted: the lengths of
/// `EpochInfo`'s four lists (`protocol.views.EpochCounts`).
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct EpochCounts {
    pub hosts: u32,
    pub validators: u32,
    pub committed: u32,
    pub accepted: u32,
}

#[derive(Serialize)]
pub struct EpochsResponse {
    pub epochs: Vec<EpochInfo>,
}

/// `protocol.messages.Commitment`.
#[derive(Serialize)]
pub struct CommitmentView {
    pub epoch: u64,
    pub checkpoint_root: String,
    pub delta_hash: String,
    pub loss_digest: String,
    pub segments: u32,
    pub train_loss_micro: u64,
    pub trap_commit: String,
}

/// `protocol.messages.ModelProposal`.
#[derive(Serialize)]
pub struct ProposalView {
    pub epoch: u64,
    pub model_hash: String,
    pub val_loss_micro: u64,
    pub excluded: Vec<String>,
}

/// An item of `challenges {}` (`protocol.views.Challenge`): one challenge the validator sits
/// on, in the round it was assigned.
#[derive(Serialize)]
pub struct ChallengeInfo {
    pub epoch: u64,
    pub host: String,
    pub segment: u32,
    pub segments: u32,
    pub checkpoint_root: String,
    pub delta_hash: String,
    pub loss_digest: String,
    pub train_loss_micro: u64,
    pub endpoint: String,
    /// The round this validator sits in (0: a round-0 seat; 1: the final round of a disputed
    /// challenge).
    pub round: u32,
    /// The challenge's round-0 seats.
    pub validators: Vec<String>,
    /// Whether this validator committed / opened its verdict.
    pub committed: bool,
    pub revealed: bool,
    /// Decided by the final vote of V.
    pub disputed: bool,
    /// A gain dispute: the final question is the probe gain on the dispute windows, and every
    /// round-0 seat re-votes (omitted when false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gain_dispute: bool,
    /// Whether the current phase waits for this validator on it: its commitment (verify,
    /// dispute) or its opening (verdict_reveal, dispute_reveal).
    pub due: bool,
    pub outcome: ChallengeOutcome,
}

#[derive(Serialize)]
pub struct ChallengesResponse {
    pub challenges: Vec<ChallengeInfo>,
    /// The last host this page scanned, when more may follow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `protocol.views.Vote`: one member's part in a challenge: its round, its commitment (public
/// once posted, but it reveals nothing), and its opened verdict.
#[derive(Serialize)]
pub struct VoteView {
    pub validator: String,
    pub round: u32,
    pub commitment: Option<String>,
    pub outcome: Option<VoteOutcome>,
    pub distance: Option<String>,
    pub evidence: Option<String>,
    /// The opened commitment's salt (it seeds the next dispute round's committees).
    pub salt: Option<String>,
    /// The host's probe gain the opened verdict carries (its last segment, probe on).
    pub gain_micro: Option<i64>,
    /// In a gain dispute: the opened vote's gain on the host's dispute windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispute_gain_micro: Option<i64>,
    /// In a gain dispute: the main-window gain the seat's round-0 `pass` opened, which its
    /// re-vote (shown in the other fields) followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round0_gain_micro: Option<i64>,
}

/// `protocol.views.ChallengeReport`.
#[derive(Serialize)]
pub struct ChallengeReport {
    pub host: String,
    pub segment: u32,
    /// The host declared this segment a trap.
    pub trap: bool,
    /// 1 when it went to the final vote, else 0.
    pub rounds: u32,
    /// Its round-0 seats that objected.
    pub objectors: Vec<String>,
    pub votes: Vec<VoteView>,
    pub outcome: ChallengeOutcome,
    /// The host's probe gain the decision carries (its last segment, probe on).
    pub gain_micro: Option<i64>,
}

/// `protocol.views.HostReport`.
#[derive(Serialize)]
pub struct HostReport {
    pub address: String,
    pub stake: Uint128,
    /// Its weight in the epoch's start and model votes, when below its stake at join (a slash of
    /// the epoch before landed after it joined: `records::HostCuts`); omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<Uint128>,
    pub revealed: bool,
    pub commitment: Option<CommitmentView>,
    pub outcome: &'static str,
    pub slashed: Uint128,
    pub reward: Uint128,
    /// Catcher shares of the validators it caught on its traps (auditors).
    pub catcher_reward: Uint128,
    /// The trap segments it opened (None: not opened).
    pub traps: Option<Vec<u32>>,
    pub proposal: Option<ProposalView>,
    /// The compute-profile class it declared at join (`crate::classes`).
    pub compute_class: String,
    /// Its probe gain in micro-nats as decided on its last segment (None: probe off, or not
    /// decided with one).
    pub gain_micro: Option<i64>,
}

/// An item of a `report` page's `validators` (`protocol.views.ValidatorPart`): a validator's
/// part in the epoch but its counts, which a page gives for its own challenges (`counts`).
#[derive(Serialize)]
pub struct ValidatorPart {
    pub address: String,
    pub stake: Uint128,
    /// Its weight in the epoch's draws and votes, when below its stake at join (a slash of the
    /// epoch before landed after it joined: `records::WEIGHT_CAPS`); omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<Uint128>,
    pub revealed: bool,
    pub outcome: &'static str,
    pub slashed: Uint128,
    pub reward: Uint128,
    pub catcher_reward: Uint128,
    /// The compute-profile class it declared at join (`crate::classes`).
    pub compute_class: String,
}

/// An item of a `report` page's `counts` (`protocol.views.ValidatorCounts`): how a validator did
/// on the challenges of that page's hosts. Summed over every page they are its counts in
/// `protocol.views.ValidatorReport` (each challenge counts on the page of its host only).
#[derive(Serialize)]
pub struct ValidatorCounts {
    pub validator: String,
    pub assigned: u32,
    pub committed: u32,
    pub voted: u32,
    pub against: u32,
    pub unavailable: u32,
    /// `unavailable` votes the final vote contradicted (decided pass or fail).
    pub unserved: u32,
}

/// Answer to `report {...}` (`protocol.views.ReportPage`): the epoch's header on every page, and
/// the page's participants: its hosts with their challenges, its validators, and the counts the
/// page's challenges give each validator that sat on them.
#[derive(Serialize)]
pub struct ReportPage {
    pub run_id: String,
    pub epoch: u64,
    pub phase: &'static str,
    pub phase_deadline: u64,
    pub started_at: u64,
    pub model_hash: String,
    pub next_model_hash: Option<String>,
    pub agreed: Option<bool>,
    pub seed: Option<String>,
    pub round: u32,
    pub abandoned: bool,
    pub slashed_total: Uint128,
    pub to_treasury: Uint128,
    pub to_catchers: Uint128,
    pub rewards_total: Uint128,
    pub hosts: Vec<HostReport>,
    pub validators: Vec<ValidatorPart>,
    pub challenges: Vec<ChallengeReport>,
    pub counts: Vec<ValidatorCounts>,
    /// The last participant this page covered, when more follow; with `next_segment`, the host
    /// the page stopped inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The segment of host `next`'s first challenge left for the next page (a host split over
    /// pages), absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_segment: Option<u32>,
}

/// Answer to `participant {...}` (`protocol.views.ParticipantStatus`).
#[derive(Serialize)]
pub struct ParticipantStatus {
    pub epoch: u64,
    pub phase: &'static str,
    pub phase_deadline: u64,
    pub model_hash: String,
    pub prev_seed: String,
    pub address: String,
    pub joined: bool,
    /// The role it joined in; None if it did not join.
    pub role: Option<Role>,
    /// Its stake at join ("0" if it did not join).
    pub stake: Uint128,
    pub committed: bool,
    pub revealed: bool,
    /// The dispute round in progress (0: none).
    pub round: u32,
    /// Validators: challenges assigned to it (every round), and verdicts it opened on them.
    pub assigned: u32,
    pub voted: u32,
    /// Validators: challenges still waiting for its commitment (in `verify`/`dispute`) or for
    /// its opening (in `verdict_reveal`/`dispute_reveal`).
    pub to_commit: u32,
    pub to_reveal: u32,
    /// Validators: it holds round-0 seats and has not sent `ready` (in `objection`).
    pub ready_due: bool,
    /// Hosts: it has challenges (and so opens its trap commitment in `objection`), and it did.
    pub challenged: bool,
    pub traps_opened: bool,
    pub outcome: &'static str,
    pub proposed: bool,
}

/// Answer to `compute_class {...}` (`protocol.views.ComputeClassStatus`).
#[derive(Serialize)]
pub struct ComputeClassStatus {
    pub epoch: u64,
    pub phase: &'static str,
    pub class: String,
    /// Its validators that joined `epoch` so far, and their stake at join.
    pub validators: u32,
    pub stake: Uint128,
    /// How many must join for the class to be served: `max(1, phases.min_validators)`.
    pub needed: u32,
    pub served: bool,
    /// Its validators in the previous epoch's V (joined and revealed), and their stake.
    pub previous_validators: u32,
    pub previous_stake: Uint128,
}

/// An item of `aggregation_inputs {...}` (`protocol.views.AggregationInput`).
#[derive(Serialize)]
pub struct AggregationInput {
    pub address: String,
    pub endpoint: String,
    pub delta_hash: String,
    /// The segments its Δ covers (S, or fewer in a partial epoch): its aggregation weight.
    pub segments: u32,
    /// Its probe gain in micro-nats as decided on its last segment (None: probe off).
    pub gain_micro: Option<i64>,
}

#[derive(Serialize)]
pub struct AggregationInputsResponse {
    pub hosts: Vec<AggregationInput>,
}

/// Parse a JSON argument; a failure names what was being parsed.
pub fn parse_json<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, ContractError> {
    serde_json::from_slice(bytes).map_err(|e| ContractError::InvalidJson {
        what,
        reason: e.to_string(),
    })
}

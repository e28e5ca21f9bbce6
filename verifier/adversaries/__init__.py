"""The adversary catalogue: hosts that fake work or withhold it, and validators that lie.

Every host adversary is a :class:`trainer.behaviour.HostBehaviour` (through
:class:`~verifier.adversaries.base.Adversary`): it commits its epoch through the host's
:class:`trainer.epoch_store.EpochStore`, in exactly the files of an honest host, so
:class:`trainer.artifacts.LocalArtifacts` serves it like any other. Segments it trains honestly go
through the trainer's one step function from whatever leaf it committed before (so they replay
correctly); only the segments it fakes differ. After :meth:`train_epoch` each adversary records
which segments of the epoch it faked (:attr:`Adversary.faked`), and
:meth:`Adversary.expected_detection` states the probability that one validator set catches it in
one epoch, given ``k`` challenges plus the last segment and that each faked segment fails when it
is replayed.

Modules, by attack family:

==================  ==========================================================================
``base``            the shared bases (:class:`Adversary`, :class:`SegmentFaker`,
                    :class:`FractionFaker`), ``honest``, and
                    committing a faked epoch (:func:`~verifier.adversaries.base.commit_leaves`,
                    :func:`~verifier.adversaries.base.recommit`)
``work``            work-saving cheats: ``lazy``, ``wrong_data``, ``wrong_lr``, ``infinitesimal``
``forged``          forged pseudo-gradients and borrowed work: ``noise``, ``scaled``,
                    ``sign_flip``, ``stale``, ``copycat``, ``fake_losses``
``pol``             published Proof-of-Learning attacks: ``crafted``, ``blindfold``, ``interpolate``
``aggregation``     steered aggregation attacks: ``alie``, ``ipm``
``serving``         ``withhold``, ``selective_serve``, ``slow_drip``
``game``            hosts that play the settlement game: ``selective_reveal``, ``auditor``
``forgery``         forgeries within the tolerance, which pass every replay: ``poison``, ``moments``,
                    ``muon_momentum``; and ``low_precision``, ``fake_train_loss``
``unseen``          what no replay sees: ``shifted_start``, ``jump``
``validators``      validator behaviours: ``honest``, ``always_pass``, ``always_fail``, ``silent``,
                    ``copycat``
``registry``        names -> classes (``ADVERSARIES``, ``VALIDATORS``) and the text parser
==================  ==========================================================================

Host adversaries (``ADVERSARIES``, parameters in the order ``name:a,b`` gives them):

==================  ==========================================================================
``honest``          the honest host (for comparisons)
``lazy:f,unit,how`` fakes each segment (``unit=segment``) or each step (``unit=step``) with
                    probability ``f``: a faked segment copies its start (``how=copy``) or
                    extrapolates the previous update (``how=extrapolate``); a skipped step
                    leaves the weights alone and repeats the last loss
``noise:scale``     honest leaves; commits a random Δ of ``scale`` × the honest Δ's norm
``scaled:factor``   honest leaves; commits ``factor`` × Δ
``sign_flip``       honest leaves; commits −Δ
``stale:mode``      reuses its previous epoch: ``all`` (leaves, losses and Δ, RNG keys rewritten
                    to this epoch) or ``delta`` (honest leaves, last epoch's Δ)
``copycat:mode``    copies another host (``victim`` source): ``all`` (leaves, losses, Δ) or
                    ``delta`` (honest leaves, the victim's Δ)
``wrong_data:f``    trains a fraction ``f`` of segments on another host's batches
``wrong_lr:factor,f``  trains a fraction ``f`` of segments with ``factor`` × the learning rate
``fake_losses:factor``  trains honestly, records and commits ``factor`` × every loss
``withhold:what``   trains honestly, commits, then serves nothing (``all``) or no
                    ``checkpoints`` / ``proofs`` / ``delta`` / ``losses``
``selective_serve:f``  fakes a fraction ``f`` of its segments (all by default) and serves each
                    epoch to one validator only (the first that asks)
``slow_drip:every`` trains honestly, commits, then serves one 4 KiB chunk every ``every``
                    seconds (0.05): too slow to be read within any reader's budget
``selective_reveal:n``  fakes ``n`` segments before the last and reveals its beacon secret last,
                    withholding it when its challenges would hit a faked segment
``auditor:n``       an honest host with ``n`` trap segments (their end leaf corrupted, far above
                    τ), declared in its trap commitment and opened after the verdicts
``crafted:f``       Zhang et al. 2022 (adversarial examples for PoL): trains a fraction ``f`` of
                    segments on data of its own choosing (one batch it picked, repeated)
``blindfold:f``     Fang et al. 2023, top-Q blindfolding: fakes a fraction ``f`` of the
                    segments before the last with small updates (a verifier that checks only the
                    largest updates never looks at them)
``interpolate:scale``  Fang et al. 2023: leaves on the straight line from θ_e to a target model
                    (a stolen one, or θ_e plus a random direction of ``scale`` × a typical
                    epoch's update), losses computed by forward passes at those points
``infinitesimal``   forges AdamW's second moments (huge ``v``) at leaf 1 so that every later
                    replay makes vanishing updates, then "trains" segments 1… by weight decay
                    alone, at no gradient cost
``alie:z``          commits Δ = mean − z·std of its peers' Δs (``peers`` sources), honest leaves
``ipm:epsilon``     commits Δ = −ε × its honest Δ (inner-product manipulation), honest leaves
``poison:direction,fraction``  trains every step, then moves every leaf's parameters along
                    ``direction`` (``undo``, ``amplify``, ``random``, ``ascent``, ``target``) by the
                    most that keeps every check within ``fraction`` of its threshold
``moments:kind,fraction``  the same with AdamW's moments (``v_down``, ``v_down_top``, ``m_along``,
                    ``m_against``, ``m_untouched``)
``muon_momentum:kind,fraction``  the same with Muon's momenta of the hidden matrices (``along``,
                    ``against``, ``ascent``, ``random``; runs with ``inner_optimizer = "muon"``)
``low_precision:dtype,steps,where``  ``steps`` of every segment in ``bfloat16``/``float16``
``fake_train_loss:factor``  trains honestly, reports ``factor`` × its train loss
``shifted_start:scale``  trains honestly from θ_e + a shift (``scale`` × lr per coordinate),
                    commits its Δ against θ_e: only leaf 0 is wrong
``jump:segments,ratio,direction,aim``  fakes ``segments`` segments before the last by displacing
                    their end along ``direction`` (``ascent``, ``gradient``, ``matrices``,
                    ``random``) so that the committed Δ is ``ratio`` × honest (0: the edge of the
                    per-coordinate bound), each epoch's direction or the ``first`` one's; every
                    other segment and the Δ pass
==================  ==========================================================================

Validator behaviours (``VALIDATORS``): ``honest``, ``always_pass``, ``always_fail``, ``silent`` —
the validator node commits what :meth:`ValidatorBehaviour.decide` returns, given the replay as a
call a liar never makes — and ``copycat``, which posts another validator's commitment and opening
instead (and never opens).

What is compute stays here: faked training, withholding artifact sources, verdicts decided
without replaying. The adversaries that act on chain beyond that (``selective_reveal``'s reading
of the others' reveals, ``copycat``'s posting of others' votes) are node wrappers in
``node.adversaries``, which may talk to the chain.

The names below are the catalogue's public interface; import them from here.
"""

from verifier.adversaries.aggregation import ALIE, IPM
from verifier.adversaries.base import (
                                       Adversary,
                                       FractionFaker,
                                       Honest,
                                       SegmentFaker,
                                       clone_state,
                                       commit_leaves,
                                       recommit,
)
from verifier.adversaries.forged import (
                                       Copycat,
                                       FakeLosses,
                                       HonestThenRecommit,
                                       NoiseDelta,
                                       ScaledDelta,
                                       SignFlipDelta,
                                       StaleDelta,
)
from verifier.adversaries.forgery import FakeTrainLoss, LowPrecision, Moments, MuonMomentum, Poison
from verifier.adversaries.game import Auditor, SelectiveReveal
from verifier.adversaries.pol import Blindfold, Crafted, Interpolate
from verifier.adversaries.registry import (
                                       ADVERSARIES,
                                       VALIDATORS,
                                       make_adversary,
                                       make_validator_behaviour,
                                       parse_adversary,
)
from verifier.adversaries.serving import FirstReaderSource, SelectiveServe, WithheldSource, Withhold
from verifier.adversaries.unseen import Jump, ShiftedStart
from verifier.adversaries.validators import AlwaysFail, AlwaysPass, CopycatValidator, Silent, ValidatorBehaviour
from verifier.adversaries.work import Infinitesimal, Lazy, WrongData, WrongLR

__all__ = [
                                       "ADVERSARIES",
                                       "ALIE",
                                       "IPM",
                                       "VALIDATORS",
                                       "Adversary",
                                       "AlwaysFail",
                                       "AlwaysPass",
                                       "Auditor",
                                       "Blindfold",
                                       "Copycat",
                                       "CopycatValidator",
                                       "Crafted",
                                       "FakeLosses",
                                       "FakeTrainLoss",
                                       "FirstReaderSource",
                                       "FractionFaker",
                                       "Honest",
                                       "HonestThenRecommit",
                                       "Infinitesimal",
                                       "Interpolate",
                                       "Jump",
                                       "Lazy",
                                       "LowPrecision",
                                       "Moments",
                                       "MuonMomentum",
                                       "NoiseDelta",
                                       "Poison",
                                       "ScaledDelta",
                                       "SegmentFaker",
                                       "SelectiveReveal",
                                       "SelectiveServe",
                                       "ShiftedStart",
                                       "SignFlipDelta",
                                       "Silent",
                                       "StaleDelta",
                                       "ValidatorBehaviour",
                                       "WithheldSource",
                                       "Withhold",
                                       "WrongData",
                                       "WrongLR",
                                       "clone_state",
                                       "commit_leaves",
                                       "make_adversary",
                                       "make_validator_behaviour",
                                       "parse_adversary",
                                       "recommit",
]

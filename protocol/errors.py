"""The root of every error the project raises on purpose.

Each package derives its errors from :class:`VerilocoError` (protocol: ``EncodingError``,
``KeyFormatError``, ``MerkleError``, ...; chain: ``LedgerError`` and ``ContractError``; trainer:
``TensorFileError``, ``ArtifactUnavailable``, ...; node: ``GlobalStateUnavailable``; the CLI:
``CommandError``), so one ``except VerilocoError`` tells "a refusal or bad input the project
anticipated, with a readable message" from a bug. The CLI prints such an error as one line.

Errors that describe a bad value keep :class:`ValueError` as a second base, so callers that
catch ``ValueError`` (and pydantic validators, which turn a ``ValueError`` into a validation
error) keep working.
"""

from __future__ import annotations


class VerilocoError(Exception):
    """An anticipated failure: bad input, a missing or damaged file, a refused operation.

    ``str(err)`` is a complete sentence for a user; it never contains secret material.
    """

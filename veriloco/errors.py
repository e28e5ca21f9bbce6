"""The one exception type the CLI turns into a clean one-line error."""


class VerilocoError(Exception):
    """A user-facing error: bad input, missing file, refused operation. Printed as one line."""

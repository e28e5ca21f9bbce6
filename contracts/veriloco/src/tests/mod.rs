//! Native tests of the whole contract: the phase machine on the in-memory store (`phases`) and
//! every shared vector under `tests/vectors/` (`vectors`).

mod phases;
mod vectors;

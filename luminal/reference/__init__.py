"""The reference runtime: numpy implementations of every primitive; the oracle every
compiled runtime and every search candidate is checked against."""

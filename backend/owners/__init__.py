"""Who owns each part of a job's wall time: phase -> component -> system -> owner, as data."""

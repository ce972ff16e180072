"""Running a plan: target checks, fio, the recording of the replay, fidelity."""

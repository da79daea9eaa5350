"""Crowds and attacks against a served page: the load check (`load_check`: a server started, calls alone and at
once), the crowd check (`crowd_check`: many visitors, memory sampled), the crowd's attacks (`crowd_attacks`) and
the door's (`door_attacks`). Driven by `scripts/measure_crowd.py`, `measure_door.py` and `crowd_runs.py`.

Part of the workshop (`bench`): imported only by `scripts/` and `tests/`. May import the product and `training`.
"""

"""The world: SimPy environment, market, scenarios, recording, replay and the command line."""

"""Simulated vLLM server: a pure engine model (engine, kvcache, steptime, profiles) and its HTTP face
(driver, app, server). Entry points: `gateway.sim.server.SimServer`, `gateway.sim.profiles.get_profile`.
"""

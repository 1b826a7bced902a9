"""The user's LLM servers as A/B arms: probe them, stream from them, launch llama-servers.

    info = probe("http://127.0.0.1:8080")          # kind, model, drafting, what it reports
    engine = ServerEngine()                         # an Engine whose arms are endpoints
    run_plan(plan_with_server_arms, engine)         # the same paired protocol as local engines

Nothing here imports torch or the engines' heavy packages: the packaged app, which carries
no torch, can A/B servers. HTTP goes through the standard library (http.client), with a
total deadline on every request and bounds on bytes and tokens (core.servers.transport), so
no server can hang a run or fill the memory; what a server reports is checked before it
becomes a figure (core.servers.readings).
"""

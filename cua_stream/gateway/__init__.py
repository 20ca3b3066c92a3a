"""The session gateway: token-in/token-out bookkeeping between computer-1's LiteLLM and the engine.

Pure modules (messages, calltree, rendering, mismatch, records, sampling) hold the TITO logic, and
three more keep the per-turn path short (request_prefix with json_scan: read only the new part of a
request; fast_encoder: the tokenizer's ids without its per-word overhead); the service and the HTTP app
sit at the edge. Importing this package stays cheap (no torch, no FastAPI).
"""

"""The session gateway: token-in/token-out bookkeeping between computer-1's LiteLLM and the engine.

Pure modules (messages, calltree, rendering, mismatch, records, sampling) hold the TITO logic; the
service and the HTTP app sit at the edge. Importing this package stays cheap (no torch, no FastAPI).
"""

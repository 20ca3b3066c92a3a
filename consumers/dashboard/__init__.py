"""The live dashboard: a consumer of every episode topic (live or a replayed range) that keeps a board of
the run and serves it as a web page fed by server-sent events."""

#!/bin/bash
# Harbor's verifier, inside the episode: what the page reported + the final answer -> reward.txt
exec "${CUA_PYTHON:-python3}" -m cua_stream.tasks.verify --task click-box

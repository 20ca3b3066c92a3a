#!/bin/bash
# Healthy once this start of the broker has logged that it serves.
grep -q 'Kafka Server started' /opt/kafka/logs/server.log

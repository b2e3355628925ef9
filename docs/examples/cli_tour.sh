# A tour of the `dhp` command line. Every command takes --store PATH (default: $DHP_STORE,
# else ./dhp-data), before or after the command; `init`, `dispatch` and `import` create the
# store, the others need one. A handoff id may be shortened to a unique prefix, as with git.
export DHP_STORE=./data

# Store a handoff; prints its id. The same intent again gives the same id.
HID=$(dhp dispatch --kind etl.import --inputs '{"file": "a.csv"}' \
        --output-schema '{"type": "object", "required": ["rows"]}' \
        --budget '{"max_attempts": 3}')
echo "$HID"
dhp dispatch --kind etl.import --inputs '{"file": "a.csv"}' \
    --output-schema '{"type": "object", "required": ["rows"]}' --budget '{"max_attempts": 3}'

dhp status "${HID:7:8}"
dhp dispatch --kind etl.import --inputs '{"file": "b.csv"}' > /dev/null
dhp --store ./data ls --kind etl.import          # newest first, 50 at a time (--limit, --all)

# Machines read --json; cancel, then list by state.
dhp status --json "$HID" | python -c 'import json, sys; print(json.load(sys.stdin)["fence"])'
dhp cancel "$HID"
dhp ls --state cancelled

# The portable log, checked by the validator.
dhp export "$HID" handoff.jsonl
dhp validate handoff.jsonl

# Errors: exit 1 when refused or not found, 2 for bad input.
dhp result "$HID"; echo "exit $?"
dhp status 1234; echo "exit $?"
dhp status xyz; echo "exit $?"
dhp ls --store ./nowhere; echo "exit $?"

"""Agent protocols on top of DHP: the A2A bridge (`dhp-a2a`) and the MCP server (`dhp-mcp`).

Each module here needs its optional extra (`a2a`, `mcp`); nothing in the core imports them.
"""

"""Agent-facing front ends of DHP: the MCP server (dhp-mcp)."""

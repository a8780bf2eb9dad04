// Package footprint holds two builds of the example order service, with the
// agent's blank import (agent) and without it (noagent), so that
// TestAgentFootprint in patches can measure what the agent adds to a
// service binary.
package footprint

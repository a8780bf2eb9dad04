package hook

// jumpSize is the length of the jump gomonkey writes over a function's
// first bytes on arm64 (MOVZ/MOVK x26 ×4, LDR x10, BR x10).
const jumpSize = 24

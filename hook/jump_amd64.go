package hook

// jumpSize is the length of the jump gomonkey writes over a function's
// first bytes on amd64 (MOV rdx, imm64; JMP [rdx]).
const jumpSize = 12

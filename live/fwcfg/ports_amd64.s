#include "textflag.h"

// func inb(port uint16) uint8
TEXT ·inb(SB), NOSPLIT, $0-9
	MOVW port+0(FP), DX
	BYTE $0xec // INB DX, AL
	MOVB AX, ret+8(FP)
	RET

// func outw(port uint16, val uint16)
TEXT ·outw(SB), NOSPLIT, $0-4
	MOVW port+0(FP), DX
	MOVW val+2(FP), AX
	BYTE $0x66 // operand size: 16 bits
	BYTE $0xef // OUTW AX, DX
	RET

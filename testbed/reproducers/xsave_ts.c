/*
 * Does the CPU raise #NM for XSAVE, XSAVEOPT and XRSTOR while CR0.TS is set?
 *
 * The SDM says it must (XSAVE/XSAVEOPT/XRSTOR: "#NM If CR0.TS[bit 3] = 1"), as for FXSAVE
 * and SSE instructions. A hypervisor that switches FPU state lazily (Xen for PV guests
 * without eager-fpu) relies on it: it leaves the previous vCPU's registers loaded with TS
 * set and restores the right ones on the first #NM. A guest kernel's XSAVE that does not
 * fault then saves, and its XRSTOR loads, registers that Xen overwrites at the next #NM.
 *
 * A multiboot kernel: boot it with QEMU's -kernel, it prints one line per instruction
 * on COM1 and ends QEMU through isa-debug-exit (iobase 0xf4).
 */
#include "multiboot.h"

volatile uint32_t nm_count;
static uint8_t area[4096] __attribute__((aligned(64)));
static uint64_t idt[32];

void nm_stub(void);
void ud_stub(void);
void gp_stub(void);

__asm__(
	".pushsection .text\n"
	/* #NM: count it, clear TS and run the instruction again. */
	"nm_stub:\n"
	"	lock incl nm_count\n"
	"	clts\n"
	"	iret\n"
	"ud_stub:\n"
	"	push $'U'\n"
	"	call fatal\n"
	"gp_stub:\n"
	"	push $'G'\n"
	"	call fatal\n"
	".popsection\n");

void fatal(uint32_t what)
{
	puts_serial("XSAVE-TS fault ");
	putc_serial((char)what);
	puts_serial("\n");
	exit_qemu(2);
}

static void set_ts(void)
{
	uint32_t cr0;

	__asm__ volatile("mov %%cr0, %0" : "=r"(cr0));
	__asm__ volatile("mov %0, %%cr0" : : "r"(cr0 | 8) : "memory");
}

static int report(const char *name)
{
	int faulted = nm_count == 1;

	puts_serial("XSAVE-TS ");
	puts_serial(name);
	puts_serial(faulted ? " nm\n" : " no-nm\n");
	__asm__ volatile("clts");
	nm_count = 0;
	return faulted;
}

void main(void)
{
	uint32_t a, b, c, d, cr4;
	int missing = 0;

	idt[6] = gate(ud_stub);
	idt[7] = gate(nm_stub);
	idt[13] = gate(gp_stub);
	load_tables(idt, sizeof(idt));

	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (!(c & (1u << 26))) {
		puts_serial("XSAVE-TS no-xsave\n");
		exit_qemu(3);
	}
	__asm__ volatile("mov %%cr4, %0" : "=r"(cr4));
	cr4 |= (1u << 9) | (1u << 18);	/* OSFXSR, OSXSAVE */
	__asm__ volatile("mov %0, %%cr4" : : "r"(cr4));
	__asm__ volatile("xsetbv" : : "a"(3), "d"(0), "c"(0));	/* XCR0 = x87 | SSE */
	__asm__ volatile("xsave %0" : "+m"(area) : "a"(3), "d"(0));	/* a valid image for XRSTOR */
	nm_count = 0;

	/* Controls: these do fault under TS in QEMU. */
	set_ts();
	__asm__ volatile("pxor %xmm0, %xmm0");
	missing += !report("pxor");
	set_ts();
	__asm__ volatile("fxsave %0" : "+m"(area));
	missing += !report("fxsave");

	set_ts();
	__asm__ volatile("xsave %0" : "+m"(area) : "a"(3), "d"(0));
	missing += !report("xsave");
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0xd), "c"(1));
	if (a & 1) {
		set_ts();
		__asm__ volatile("xsaveopt %0" : "+m"(area) : "a"(3), "d"(0));
		missing += !report("xsaveopt");
	}
	set_ts();
	__asm__ volatile("xrstor %0" : : "m"(area), "a"(3), "d"(0));
	missing += !report("xrstor");

	puts_serial(missing ? "XSAVE-TS done missing\n" : "XSAVE-TS done ok\n");
	exit_qemu(missing ? 1 : 0);
}

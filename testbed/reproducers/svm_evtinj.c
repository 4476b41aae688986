/*
 * Is an interrupt that a hypervisor injects with SVM's EVENTINJ delivered once?
 *
 * A hypervisor injects an external interrupt only while the guest's RFLAGS.IF is set; the
 * CPU delivers it at VMRUN through an interrupt gate, which clears IF, and the guest's
 * handler then runs with interrupts off. QEMU's TCG delivers the event inside
 * helper_vmrun() but leaves cs->exception_index holding its vector. The next time the CPU
 * loop exits without an exception of its own (a kick, or the end of an -icount budget),
 * cpu_handle_exception() delivers that vector again, as an exception, whatever IF says.
 * In a Xen PVH guest that is the event-channel upcall taken a second time inside the first
 * one, or inside any interrupts-off section the first one reaches.
 *
 * A multiboot kernel: it programs the PIT (masked at the PIC) so that -icount has timer
 * deadlines, runs one guest under SVM with vector 0x40 injected, and lets the guest's
 * handler spin with IF clear for about 40 ms of guest time before HLT (intercepted). It
 * prints one line on COM1 and ends QEMU through isa-debug-exit (iobase 0xf4).
 */
#include "multiboot.h"

#define VECTOR 0x40
#define MSR_EFER 0xc0000080u
#define EFER_SVME (1u << 12)
#define MSR_VM_HSAVE_PA 0xc0010117u
#define EXIT_HLT 0x78
#define EXIT_VMRUN 0x80
#define INTERCEPT(code) (1ull << ((code) - 0x60))
#define EVTINJ_VALID (1u << 31)
/* The guest's spin: 2 instructions per round, so 40 M instructions, 40 PIT periods. */
#define SPIN_ROUNDS 20000000
#define STR(x) #x
#define XSTR(x) STR(x)

struct vmcb_seg {
	uint16_t selector, attrib;
	uint32_t limit;
	uint64_t base;
} __attribute__((packed));

/* AMD64 APM vol. 2, appendix B, as far as this test needs it. */
struct vmcb {
	uint16_t cr_read, cr_write, dr_read, dr_write;
	uint32_t exceptions;
	uint64_t intercept;
	uint8_t pad0[0x58 - 0x14];
	uint32_t asid;
	uint8_t pad1[0x70 - 0x5c];
	uint64_t exit_code, exit_info_1, exit_info_2;
	uint32_t exit_int_info, exit_int_info_err;
	uint8_t pad2[0xa8 - 0x90];
	uint32_t event_inj, event_inj_err;
	uint8_t pad3[0x400 - 0xb0];
	struct vmcb_seg es, cs, ss, ds, fs, gs, gdtr, ldtr, idtr, tr;
	uint8_t pad4[0x4cb - 0x4a0];
	uint8_t cpl;
	uint8_t pad5[0x4d0 - 0x4cc];
	uint64_t efer;
	uint8_t pad6[0x548 - 0x4d8];
	uint64_t cr4, cr3, cr0, dr7, dr6, rflags, rip;
	uint8_t pad7[0x5d8 - 0x580];
	uint64_t rsp;
	uint8_t pad8[0x668 - 0x5e0];
	uint64_t g_pat;
	uint8_t pad9[0x1000 - 0x670];
} __attribute__((packed));

_Static_assert(sizeof(struct vmcb) == 0x1000, "VMCB layout");

static struct vmcb vmcb __attribute__((aligned(4096)));
static uint8_t hsave[4096] __attribute__((aligned(4096)));
static uint64_t host_idt[32];
static uint64_t guest_idt[VECTOR + 1];

/* Written by the guest (same physical memory: no nested paging). */
volatile uint32_t deliveries, deliveries_if_clear;

void guest_entry(void);
void guest_handler(void);
void host_fault(void);
void run_guest(struct vmcb *v);

__asm__(
	".pushsection .text\n"
	/* Reached only if the injection did not happen: HLT exits to the host. */
	"guest_entry:\n"
	"	hlt\n"
	"	jmp guest_entry\n"
	/* Interrupt gate: IF is clear here. Count, note the interrupted IF, spin, exit. */
	"guest_handler:\n"
	"	lock incl deliveries\n"
	"	testl $0x200, 8(%esp)\n"
	"	jnz 1f\n"
	"	lock incl deliveries_if_clear\n"
	"1:	mov $" XSTR(SPIN_ROUNDS) ", %ecx\n"
	"2:	dec %ecx\n"
	"	jnz 2b\n"
	"	hlt\n"
	"	jmp guest_handler\n"
	"host_fault:\n"
	"	call fatal\n"
	/* VMRUN loads the guest's GPRs except RAX and RSP; the host's own are saved here. */
	"run_guest:\n"
	"	push %ebx\n"
	"	push %esi\n"
	"	push %edi\n"
	"	push %ebp\n"
	"	mov 20(%esp), %eax\n"
	"	vmrun\n"
	"	pop %ebp\n"
	"	pop %edi\n"
	"	pop %esi\n"
	"	pop %ebx\n"
	"	ret\n"
	".popsection\n"
	".pushsection .bss\n"
	".align 16\n"
	"	.skip 16384\n"
	"guest_stack_top:\n"
	".popsection\n");

extern uint8_t guest_stack_top[];

static void put_dec(uint32_t v)
{
	char buf[11];
	int i = sizeof(buf) - 1;

	buf[i] = 0;
	do {
		buf[--i] = '0' + v % 10;
		v /= 10;
	} while (v);
	puts_serial(buf + i);
}

static void put_hex(uint32_t v)
{
	int i;

	puts_serial("0x");
	for (i = 28; i >= 0; i -= 4)
		putc_serial("0123456789abcdef"[(v >> i) & 15]);
}

void fatal(void)
{
	puts_serial("SVM-EVTINJ host-fault\n");
	exit_qemu(2);
}

static void wrmsr(uint32_t msr, uint64_t v)
{
	__asm__ volatile("wrmsr" : : "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)));
}

static uint64_t rdmsr(uint32_t msr)
{
	uint32_t lo, hi;

	__asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
	return ((uint64_t)hi << 32) | lo;
}

static void load_host_tables(void)
{
	int v;

	for (v = 0; v < 32; v++)
		host_idt[v] = gate(host_fault);
	load_tables(host_idt, sizeof(host_idt));
}

static void flat(struct vmcb_seg *s, uint16_t sel, uint16_t attrib)
{
	s->selector = sel;
	s->attrib = attrib;
	s->limit = 0xffffffff;
	s->base = 0;
}

void main(void)
{
	uint32_t a, b, c, d, exit_code;

	load_host_tables();
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000001), "c"(0));
	if (!(c & (1u << 2))) {
		puts_serial("SVM-EVTINJ no-svm\n");
		exit_qemu(3);
	}

	/* PIT channel 0, rate generator at 1 kHz; the PICs masked: only timer deadlines. */
	outb(0x21, 0xff);
	outb(0xa1, 0xff);
	outb(0x43, 0x34);
	outb(0x40, 1193 & 0xff);
	outb(0x40, 1193 >> 8);

	wrmsr(MSR_EFER, rdmsr(MSR_EFER) | EFER_SVME);
	wrmsr(MSR_VM_HSAVE_PA, (uint32_t)hsave);

	guest_idt[VECTOR] = gate(guest_handler);
	vmcb.intercept = INTERCEPT(EXIT_HLT) | INTERCEPT(EXIT_VMRUN);
	vmcb.asid = 1;
	vmcb.event_inj = VECTOR | EVTINJ_VALID;	/* type 0: external interrupt */
	flat(&vmcb.cs, 0x08, 0xc9b);
	flat(&vmcb.ds, 0x10, 0xc93);
	flat(&vmcb.es, 0x10, 0xc93);
	flat(&vmcb.ss, 0x10, 0xc93);
	vmcb.gdtr.limit = sizeof(gdt) - 1;
	vmcb.gdtr.base = (uint32_t)gdt;
	vmcb.idtr.limit = sizeof(guest_idt) - 1;
	vmcb.idtr.base = (uint32_t)guest_idt;
	vmcb.cpl = 0;
	vmcb.efer = EFER_SVME;
	vmcb.cr0 = 0x11;	/* PE, ET */
	vmcb.dr6 = 0xffff0ff0;
	vmcb.dr7 = 0x400;
	vmcb.rflags = 0x202;	/* IF set: the injection is allowed */
	vmcb.rip = (uint32_t)guest_entry;
	vmcb.rsp = (uint32_t)guest_stack_top;
	vmcb.g_pat = 0x0007040600070406ull;

	run_guest(&vmcb);
	exit_code = (uint32_t)vmcb.exit_code;
	puts_serial("SVM-EVTINJ exit ");
	put_hex(exit_code);
	puts_serial(" deliveries ");
	put_dec(deliveries);
	puts_serial(" if-clear ");
	put_dec(deliveries_if_clear);
	puts_serial("\n");
	if (exit_code != EXIT_HLT || !deliveries)
		exit_qemu(2);
	exit_qemu(deliveries == 1 && !deliveries_if_clear ? 0 : 1);
}

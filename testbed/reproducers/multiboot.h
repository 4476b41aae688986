/*
 * What every reproducer here shares: the multiboot header, the entry stub and its stack, a
 * flat GDT, an interrupt gate, COM1 output and the isa-debug-exit end. Each reproducer
 * defines main(); linked with multiboot.ld.
 */
#include <stdint.h>

#define MB_MAGIC 0x1BADB002u

__attribute__((section(".multiboot"), used, aligned(4)))
static const uint32_t multiboot[3] = { MB_MAGIC, 0, -MB_MAGIC };

/* Selector 0x08: flat 32-bit code; 0x10: flat data. */
static uint64_t gdt[3] = { 0, 0x00cf9a000000ffffull, 0x00cf92000000ffffull };

__asm__(
	".pushsection .text\n"
	".globl start\n"
	"start:\n"
	"	mov $stack_top, %esp\n"
	"	call main\n"
	"1:	hlt\n"
	"	jmp 1b\n"
	".popsection\n"
	".pushsection .bss\n"
	".align 16\n"
	"	.skip 16384\n"
	"stack_top:\n"
	".popsection\n");

static inline void outb(uint16_t port, uint8_t v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline void putc_serial(char c)
{
	outb(0x3f8, c);
}

static inline void puts_serial(const char *s)
{
	while (*s)
		putc_serial(*s++);
}

static inline void exit_qemu(uint8_t code)
{
	/* isa-debug-exit: QEMU exits with (code << 1) | 1. */
	__asm__ volatile("outl %0, %1" : : "a"((uint32_t)code), "Nd"((uint16_t)0xf4));
	for (;;)
		__asm__ volatile("hlt");
}

/* A 32-bit interrupt gate to FN in the code segment. */
static inline uint64_t gate(void (*fn)(void))
{
	uint32_t a = (uint32_t)fn;

	return (a & 0xffff) | (0x08ull << 16) | (0x8eull << 40) | ((uint64_t)(a >> 16) << 48);
}

/* Load the GDT, reload the segments from it, load IDT (SIZE bytes). */
static inline void load_tables(const uint64_t *idt, uint16_t size)
{
	struct __attribute__((packed)) { uint16_t limit; uint32_t base; } g = { sizeof(gdt) - 1, (uint32_t)gdt },
		i = { size - 1, (uint32_t)idt };

	__asm__ volatile("lgdt %0\n"
			 "ljmp $0x08, $1f\n"
			 "1: mov $0x10, %%ax\n"
			 "mov %%ax, %%ds\n mov %%ax, %%es\n mov %%ax, %%ss\n"
			 "lidt %1" : : "m"(g), "m"(i) : "eax", "memory");
}

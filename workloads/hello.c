/*
 * hello - the program lmbench's lat_proc exec/shell tests run: write one
 * line with a single write(2) and exit. Deliberately minimal (no stdio,
 * no common.c) so exec cost is dominated by the kernel.
 */
#include <unistd.h>

int main(void)
{
	static const char msg[] = "Hello world\n";

	return write(STDOUT_FILENO, msg, sizeof(msg) - 1) == sizeof(msg) - 1 ? 0 : 1;
}

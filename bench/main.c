// SPDX-License-Identifier: GPL-2.0
/*
 * belbench - Beluga against the designs it replaces.
 *
 *   belbench [global options] SECTION [section options]
 *
 * Sections (each prints a table and writes OUT/SECTION-ENV.jsonl and plot
 * data OUT/NAME-ENV.dat):
 *   meta    --pool SPEC|none [--bs 4K] [--blocks N] [--lens 1,16,64,256,4096]
 *   data    --medium NAME --pool SPEC --raw PATH|anon [--counts 1,2,4,...]
 *           [--bs 2M]
 *   scale   --pool SPEC|none [--sizes 1K,16K,256K] [--threads 1,2] [--bs 4K]
 *   replay  --trace FILE [--pool SPEC|none] [--caps 10,25,50,100] [--bs 4K]
 *           [--model key=value,...]
 *   conc    --pool SPEC|none [--targets kernel,core,shm] [--workers 1,2]
 *           [--rounds 5] [--ms 300]
 *   ring    --pool SPEC|none [--rounds 5] [--blocks N]  (64-key chain: ioctl,
 *           io_uring batched 1/8/64 and SQPOLL, polled server, core, model)
 *   server, shm-server  (internal: the baseline metadata servers)
 * SPEC: dax:/dev/daxX.Y or node:N; none runs the userspace targets only.
 *
 * Global options:
 *   --env NAME     tag for every record and file name (default host)
 *   --out DIR      output directory (default build/bench)
 *   --quick        smoke run: 5 samples of ~1 ms
 *   --samples N    samples per figure, median taken (default 31, at most 64)
 *   --sample-ms X  target length of one sample (default 2)
 *   --rpc-cpu N|any|auto  CPU of the baseline server and its client
 *                  threads (default auto: the fastest same-CPU placement,
 *                  the RPC's best case; see bench.h)
 *   --shm-cpu N    CPU of the spin-polling server (default: the first CPU
 *                  that the single-threaded sections' clients do not use)
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(void)
{
	fprintf(stderr,
		"usage: belbench [--env NAME] [--out DIR] [--quick] [--samples N] [--sample-ms X]\n"
		"                meta|data|scale|replay|conc|ring [options]\n"
		"see the comment at the top of bench/main.c\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	bench_note_cpus();
	for (i = 1; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--quick")) {
			opt.quick = true;
			opt.samples = 5;
			opt.sample_ms = 1;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--env"))
			opt.env = argv[++i];
		else if (!strcmp(argv[i], "--out"))
			opt.out_dir = argv[++i];
		else if (!strcmp(argv[i], "--samples"))
			opt.samples = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--sample-ms"))
			opt.sample_ms = atof(argv[++i]);
		else if (!strcmp(argv[i], "--rpc-cpu"))
			opt.rpc_cpu = !strcmp(argv[++i], "any") ? -1 :
				      !strcmp(argv[i], "auto") ? RPC_CPU_AUTO :
				      atoi(argv[i]);
		else if (!strcmp(argv[i], "--shm-cpu"))
			opt.shm_cpu = atoi(argv[++i]);
		else
			usage();
	}
	if (i >= argc)
		usage();
	if (opt.samples < 1)
		opt.samples = 1;
	argc -= i;
	argv += i;
	if (!strcmp(argv[0], "server"))
		return server_main(argc, argv);
	if (!strcmp(argv[0], "shm-server"))
		return shm_server_main(argc, argv);
	if (!strcmp(argv[0], "meta"))
		return sec_meta(argc, argv);
	if (!strcmp(argv[0], "data"))
		return sec_data(argc, argv);
	if (!strcmp(argv[0], "scale"))
		return sec_scale(argc, argv);
	if (!strcmp(argv[0], "replay"))
		return sec_replay(argc, argv);
	if (!strcmp(argv[0], "conc"))
		return sec_conc(argc, argv);
	if (!strcmp(argv[0], "ring"))
		return sec_ring(argc, argv);
	usage();
	return 2;
}

// SPDX-License-Identifier: MIT
/*
 * fuzz_socket.c: libFuzzer harness for llgo-heapd's socket (server.c, session.c, drain.c,
 * ring.c): an in-process daemon gets, on a new connection, a packet from the input, with a
 * descriptor of a memfd whose contents (control page, rings) also come from the input, as a
 * hostile shim would send them; then perhaps ADD_RING, WAKE and BYE; then a client lists
 * and snapshots the process (so every ring is drained and every writer runs).
 *
 * Input: flags (1 byte), type index (1), packet length (2), packet, memfd contents.
 * Flags: 1 attach the memfd; 2 make the header valid for the chosen type (magic, version,
 * type, length); 4 make the control page's header valid; 8 follow with ADD_RING (ring 0),
 * WAKE and BYE; 16 set LLGO_HELLO_MEMFD; 32 a snapshot in every format.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint16_t fz_types[] = {
	LLGO_MSG_HELLO, LLGO_MSG_ADD_RING, LLGO_MSG_BYE,  LLGO_MSG_WAKE,  LLGO_MSG_LIST,
	LLGO_MSG_SNAPSHOT, LLGO_MSG_SET_RATE, LLGO_MSG_VERIFY, LLGO_MSG_DATA, LLGO_MSG_END,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_daemon_start(false);
	if (size < 4)
		return 0;
	uint8_t flags = data[0];
	uint16_t type = fz_types[data[1] % (sizeof(fz_types) / sizeof(fz_types[0]))];
	size_t len = (size_t)data[2] | (size_t)data[3] << 8;
	data += 4;
	size -= 4;
	if (len > size)
		len = size;
	if (len > 1024)
		len = 1024;
	unsigned char pkt[1024];
	memset(pkt, 0, sizeof(pkt));
	memcpy(pkt, data, len);
	if (flags & 2) {
		if (len < sizeof(struct llgo_msg_header))
			len = sizeof(struct llgo_msg_header);
		struct llgo_msg_header h;
		msg_header_init(&h, type, (uint32_t)len);
		memcpy(pkt, &h, sizeof(h));
		if (type == LLGO_MSG_HELLO && len >= sizeof(struct llgo_msg_hello)) {
			struct llgo_msg_hello m;
			memcpy(&m, pkt, sizeof(m));
			/* never wait for an answer we do not read; the memfd flag as chosen */
			m.flags = (m.flags | LLGO_HELLO_NO_ACK) & ~LLGO_HELLO_MEMFD;
			if (flags & 16)
				m.flags |= LLGO_HELLO_MEMFD;
			memcpy(pkt, &m, sizeof(m));
		}
		if (type == LLGO_MSG_VERIFY) /* a verify would hold the worker for its window */
			return 0;
	}
	const uint8_t *mem = data + len;
	size_t memlen = size - len;
	size_t flen = LLGO_CTL_SIZE + ((memlen + 4095) & ~(size_t)4095);
	if (flen > (1u << 20))
		flen = 1u << 20;
	int fd = (flags & 1) ? fz_memfd(mem, memlen, flen, flags & 4) : -1;
	int s = fz_connect();
	if (s >= 0) {
		msg_send(s, pkt, len, fd);
		if (flags & 8) {
			struct llgo_msg_add_ring a;
			memset(&a, 0, sizeof(a));
			msg_header_init(&a.h, LLGO_MSG_ADD_RING, sizeof(a));
			a.data_size = LLGO_RING_MIN_DATA;
			msg_send(s, &a, sizeof(a), -1);
			struct llgo_msg_header h;
			msg_header_init(&h, LLGO_MSG_WAKE, sizeof(h));
			msg_send(s, &h, sizeof(h), -1);
			msg_header_init(&h, LLGO_MSG_BYE, sizeof(h));
			msg_send(s, &h, sizeof(h), -1);
		}
		fz_list(); /* waits for the HELLO in flight */
		if (flags & 32) {
			for (int f = LLGO_FORMAT_PPROF; f <= LLGO_FORMAT_TOP; f++)
				fz_snapshot(f);
		} else {
			fz_snapshot(LLGO_FORMAT_TEXT);
		}
		close(s);
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

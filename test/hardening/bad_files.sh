# test/hardening/bad_files.sh: writes the little-endian binary files the bad-input tests need (token
# shards, tokenizer files, patched headers) with bash alone. Sourced, not run.

# le32 VALUE: the 4 bytes of VALUE as a little-endian int32, as printf escapes
le32() {
    local v=$(($1 & 0xffffffff))
    printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255))
}

# put32 FILE INDEX VALUE: writes int32 VALUE at int32 index INDEX (byte 4·INDEX), in place
put32() {
    printf "$(le32 "$3")" | dd of="$1" bs=1 seek=$((4 * $2)) conv=notrunc status=none
}

# put16 FILE BYTE_OFFSET VALUE: writes uint16 VALUE at a byte offset, in place
put16() {
    local v=$(($3 & 0xffff))
    printf "$(printf '\\x%02x\\x%02x' $((v & 255)) $((v >> 8)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# shard FILE NTOKENS: an llm.c token shard of NTOKENS zeros (token 0 is valid for any vocabulary)
shard() {
    head -c $((1024 + 2 * $2)) /dev/zero >"$1"
    put32 "$1" 0 20240520
    put32 "$1" 1 1
    put32 "$1" 2 "$2"
}

# shard32 FILE NTOKENS: the same in llm.c's uint32 kind (Llama-3's: magic 20240801, version 7);
# token i is the int32 at index 256 + i (put32)
shard32() {
    head -c $((1024 + 4 * $2)) /dev/zero >"$1"
    put32 "$1" 0 20240801
    put32 "$1" 1 7
    put32 "$1" 2 "$2"
}

# tokenizer FILE COUNT VERSION EOT: an llm.c tokenizer whose token i is the byte i mod 256
tokenizer() {
    local file=$1 count=$2 i
    head -c 1024 /dev/zero >"$file"
    put32 "$file" 0 20240328
    put32 "$file" 1 "$3"
    put32 "$file" 2 "$count"
    put32 "$file" 3 "$4"
    for ((i = 0; i < count; i++)); do printf "\\x01$(printf '\\x%02x' $((i % 256)))"; done >>"$file"
}

# nan32 / inf32: the bit patterns of a quiet NaN and of +infinity, for put32
nan32=$((0x7fc00000))
inf32=$((0x7f800000))

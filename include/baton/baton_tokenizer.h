/* baton_tokenizer.h: text to token ids and back, from a Hugging Face tokenizer.json, so that a C
 * program runs a model baton_export exported (its directory holds the model's tokenizer.json) from
 * text to text with no Python.
 *
 * Supported: the byte-level BPE tokenizers of GPT-2, Llama 3, Qwen 2/2.5/3, SmolLM and StarCoder
 * (numbers split out first) and the many models that share their pre-tokenizers, and the
 * SentencePiece-converted BPE tokenizers of Llama 2, Mistral, TinyLlama and Gemma (byte fallback;
 * "▁" for spaces, by the normalizer or the Metaspace pre-tokenizer). The ids are those of the
 * `tokenizers` library's encode(text, add_special_tokens) and the text that of its decode(ids,
 * skip_special_tokens); the Python tests compare them on several thousand texts. A tokenizer.json
 * outside that set is refused at load with a message that names the file, the place and what is
 * not supported: never a different answer. Qwen's NFC normalizer is applied as the library
 * applies it. Unicode 15.0.
 *
 * A loaded tokenizer is read-only: any number of threads may encode and decode with it at once. */
#ifndef BATON_TOKENIZER_H
#define BATON_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "baton/baton.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct baton_tokenizer baton_tokenizer;

/* Reads the tokenizer.json at path. BATON_EIO: the file cannot be read; BATON_EPARSE: not JSON;
 * BATON_ENOTSUP: a model, normalizer, pre-tokenizer, post-processor, decoder or added-token
 * option this implementation does not have (the message names it); BATON_EPLAN: fields missing or
 * of the wrong kind, ids out of place. Free it with baton_tokenizer_free. */
BATON_API int baton_tokenizer_load(const char *path, baton_tokenizer **out, baton_error *err);
BATON_API void baton_tokenizer_free(baton_tokenizer *tok);

/* One more than the largest id of the vocabulary and the added tokens; 0 for NULL. */
BATON_API int64_t baton_tokenizer_vocab_size(const baton_tokenizer *tok);

/* The id of a token by its text ("<|eot_id|>", "hello" in the vocabulary's own spelling) into
 * *id: 0, or BATON_ENOENT. */
BATON_API int baton_tokenizer_token_id(const baton_tokenizer *tok, const char *token, int64_t *id);

/* The text of token id as the vocabulary spells it (byte-level tokens in their alphabet: "Ġthe"),
 * owned by the tokenizer; NULL for an id without a token (models often pad their vocabulary past
 * the tokenizer's), a negative id or a NULL tok. */
BATON_API const char *baton_tokenizer_id_token(const baton_tokenizer *tok, int64_t id);

/* Encodes len bytes of UTF-8 text. add_special: the post-processor's template around the ids (the
 * beginning-of-text token of Llama's), as `add_special_tokens`. Sets *n to the count of the whole
 * encoding and writes at most cap ids: cap 0 only sizes the buffer; more ids than a cap > 0 is
 * BATON_EINVAL after the first cap are written. BATON_EINVAL also for text that is not UTF-8 (the
 * message gives the byte offset), and for a character the model has no token for where it has
 * neither byte fallback nor an unknown token. Allocates working memory. */
BATON_API int baton_tokenizer_encode(const baton_tokenizer *tok, const char *text, size_t len,
                                     int add_special, int64_t *ids, size_t cap, size_t *n,
                                     baton_error *err);

/* Decodes n ids into UTF-8 text, NUL-terminated, at most cap bytes with the NUL; *len receives the
 * text's length without the NUL: cap 0 only sizes the buffer; a cap > 0 too short is BATON_EINVAL,
 * the text cut at cap - 1 bytes. skip_special leaves out the special added tokens. Bytes that do
 * not form UTF-8 (ids that cut a character) become U+FFFD, as `tokenizers` does. An id without a
 * token (baton_tokenizer_id_token NULL: past the tokenizer's vocabulary, where a model pads its
 * own) is left out, as `tokenizers` leaves it out; a negative id is BATON_EINVAL. */
BATON_API int baton_tokenizer_decode(const baton_tokenizer *tok, const int64_t *ids, size_t n,
                                     int skip_special, char *text, size_t cap, size_t *len,
                                     baton_error *err);

/* An incremental decode, for text shown as a model generates it: each id pushed gives the text it
 * settles, and the pieces of all pushes and the finish put together are, byte for byte,
 * baton_tokenizer_decode's text of all the ids. A piece holds back what later ids may still
 * change: the bytes of a character that a byte token has begun, a run of SentencePiece byte
 * tokens until the token after it (the run is one character or, if it is not UTF-8, one U+FFFD a
 * byte). The cost of a push is that of its token, not of the text so far. A decoder keeps a
 * pointer to its tokenizer (free the tokenizer after the decoder); one thread at a time. */
typedef struct baton_tokenizer_decoder baton_tokenizer_decoder;

/* skip_special as for baton_tokenizer_decode. BATON_EINVAL, BATON_ENOMEM. */
BATON_API int baton_tokenizer_decoder_create(const baton_tokenizer *tok, int skip_special,
                                             baton_tokenizer_decoder **out, baton_error *err);
BATON_API void baton_tokenizer_decoder_destroy(baton_tokenizer_decoder *dec);

/* One more id: *text (NUL-terminated, owned by the decoder, valid until its next call) and *len
 * receive the text it settles, often empty. A negative id is BATON_EINVAL and changes nothing;
 * BATON_ENOMEM starts the decode again. Allocates only while its buffers grow to the longest
 * token. */
BATON_API int baton_tokenizer_decoder_push(baton_tokenizer_decoder *dec, int64_t id,
                                           const char **text, size_t *len, baton_error *err);

/* The end of the ids: the text held back (a character the ids left unfinished, as U+FFFD), and
 * the decoder ready for a new text. */
BATON_API int baton_tokenizer_decoder_finish(baton_tokenizer_decoder *dec, const char **text,
                                             size_t *len, baton_error *err);

/* A model's chat template, as baton_export compiles it into chat.json beside the plans: the text
 * before a conversation, each role's prefix and suffix around its message, the system message the
 * template inserts when none is given, and the prompt that asks for the assistant's turn. Only
 * templates that place each message between fixed strings compile (Llama 3 / 3.1 / 3.2, Qwen 2.5
 * and 3, SmolLM2, ChatML, Gemma, Phi-3 and their kin; Mistral's, Llama 2's and Gemma 3's without
 * a system message, which they move into a user turn): the exporter renders a set of
 * conversations with the template and with the pieces and writes chat.json only when they agree.
 * docs/generate.md, "Chat". */
typedef struct baton_chat baton_chat;

typedef struct baton_chat_message {
    const char *role;    /* "system" (first only), "user" or "assistant" */
    const char *content; /* UTF-8 */
    size_t content_len;  /* its bytes; 0: up to its NUL (a model's reply may hold NUL bytes) */
} baton_chat_message;

/* Reads the chat.json at path. BATON_EIO, BATON_EPARSE, BATON_EPLAN (not a chat.json, a field
 * missing or of the wrong kind: file:line:column), BATON_ENOTSUP (a later version of the format,
 * a role other than system, user and assistant). Free it with baton_chat_free. */
BATON_API int baton_chat_load(const char *path, baton_chat **out, baton_error *err);
BATON_API void baton_chat_free(baton_chat *chat);

/* The text of n messages as the model's template writes it, with the prompt for the assistant's
 * turn after them when add_generation_prompt: NUL-terminated into text, at most cap bytes with
 * the NUL; *len receives its length without the NUL (cap 0 only sizes; a cap too short is
 * BATON_EINVAL, the text cut). Special tokens are in the text as their spelling
 * ("<|start_header_id|>"): encode it with add_special 0, as apply_chat_template(tokenize=True)
 * does. BATON_EINVAL, naming the message, for a role the template does not write, a system
 * message after the first, content that is not UTF-8, two user or two assistant messages in a row
 * where the template refuses them or writes them otherwise, and a last assistant message where
 * the template writes the last one otherwise (Qwen3's reasoning block). */
BATON_API int baton_chat_render(const baton_chat *chat, const baton_chat_message *messages,
                                size_t n, int add_generation_prompt, char *text, size_t cap,
                                size_t *len, baton_error *err);

/* The text the template writes after an assistant message ("<|eot_id|>", "<|im_end|>\n"), owned
 * by chat: a model ends its reply by generating its first special token, which a chat program
 * stops at. NULL for a NULL chat. */
BATON_API const char *baton_chat_turn_end(const baton_chat *chat);

#ifdef __cplusplus
}
#endif

#endif /* BATON_TOKENIZER_H */

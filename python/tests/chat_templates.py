"""Chat template fixtures: Jinja programs as tokenizer_config.json's "chat_template" field holds
them, modeled on the templates that model families ship (Llama 2 / 3 / 3.2, Qwen2.5, Qwen3,
ChatML fine-tunes, SmolLM2, Gemma 1/2 and 3, Mistral v0.1 and v0.3, Phi-3, Zephyr), and the
conversations the chat template compiler's tests render with them.

The templates are written here from knowledge of the families' templates, reproducing their
structure, special tokens and exact strings as closely as known; nothing was downloaded, so a
template may differ from the shipped one in details. Long Jinja lines are wrapped inside their
tags (Jinja joins adjacent string literals), which changes nothing rendered. They are meant to be
set as `tokenizer.chat_template` on a transformers tokenizer and rendered with
apply_chat_template (which supplies bos_token, eos_token, add_generation_prompt, raise_exception,
strftime_now and tojson).

TEMPLATES maps a name to a dict:
    template  the Jinja source
    bos, eos  the family's bos token text (None where its tokenizer has none) and eos token text
    special   the special / added token strings the template writes (in any of its branches)
    system    whether a system message is accepted (False: rejected or dropped)
    compiles  whether conversations of an optional first system message and then alternating
              user / assistant messages ending with the user's render as
              begin + prefix[role] + content + suffix[role] ... + generation prompt, with fixed
              strings (the content possibly trimmed, a fixed default system message possibly
              inserted when none is given)
    note      one line: the family and version modeled, and notable behaviour

CONVERSATIONS is a list of message lists (dicts of role and content), each an optional system
message followed by alternating user / assistant messages that ends with the user's.
"""

# Llama 3 (Meta-Llama-3-8B-Instruct): every message, system included, between a header and
# <|eot_id|>, content trimmed; bos before the first one.
LLAMA3 = (
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# Llama 3.2 (Llama-3.2-1B/3B-Instruct; Llama 3.1's less the built-in tools): the system block is
# always written, with the knowledge cutoff and today's date before the (trimmed) system message.
LLAMA3_2 = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- The system message is taken out of the messages, to go into the system block. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- The system block #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with"
        " JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name'
        ' and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Tools given in the user message go into the first one, with some guidance #}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first"
                            " user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name'
        ' and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'
            + message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Qwen2.5-Instruct: ChatML, a default system message when none is given, tools in the system
# message, tool calls as <tool_call> JSON, tool results in a user turn.
QWEN2_5 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and"
        " arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\":"
        " <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful'
            ' assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first)
           or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Plain ChatML, as many fine-tunes (OpenHermes and others) ship it: no default system, no bos.
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# SmolLM2-Instruct: ChatML with a default system message, written before the first message when
# that is not a system message.
SMOLLM2 = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen3 (the hybrid thinking models, Qwen3-0.6B ... 32B): ChatML without a default system; an
# assistant turn's <think> reasoning is dropped unless the turn comes after the last user query,
# where it is kept (and an empty think block written for the last turn without one);
# enable_thinking=false adds an empty think block to the generation prompt.
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and"
        " arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\":"
        " <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string
           and not(message.content.startswith('<tool_response>')
                   and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n')
                                                   .split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n')
                    + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# Gemma 1.1 / Gemma 2 instruction-tuned: no system role, strict alternation, the assistant is
# "model", contents trimmed.
GEMMA = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

# Gemma 3 instruction-tuned: like Gemma 2's, but a system message is accepted and written at the
# start of the first user turn (untrimmed, then a blank line); list contents may hold images.
GEMMA3 = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# Mistral-7B-Instruct v0.1 / v0.2: [INST] ... [/INST] around user messages, eos after the
# assistant's; no system role (raises), strict alternation, no generation prompt.
MISTRAL_V0_1 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}"
    "{% endfor %}"
)

# Mistral-7B-Instruct v0.3: the system message goes into the LAST user message, tools just
# before it, [INST] without the spaces of v0.1 before [/INST]; tool calls with 9-character ids.
MISTRAL_V0_3 = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- Checks that user and assistant messages alternate, leaving out tool calls and results #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results"
                or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must"
                                " alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with"
                                    " length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with"
                                " length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of"
                            " an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# Llama 2 chat (Llama-2-7b-chat-hf): bos before every [INST], the system message in a <<SYS>>
# block at the start of the first user message, contents stripped, " </s>" after answers.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}"
    "{% endfor %}"
)

# Phi-3-mini-4k-instruct (the July 2024 update; Phi-3.5-mini-instruct's is alike): a tag line
# before each message, <|end|> after it; eos at the end when no generation prompt is asked for.
PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# Phi-3-mini-4k-instruct as first released (April 2024): bos, the assistant's tag written after
# every user message whatever add_generation_prompt says, system messages silently dropped.
PHI3_EARLY = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') %}"
    "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}"
    "{% elif (message['role'] == 'assistant') %}"
    "{{message['content'] + '<|end|>' + '\\n'}}"
    "{% endif %}"
    "{% endfor %}"
)

# Zephyr (zephyr-7b-beta, TinyLlama-1.1B-Chat): eos after every message; the newlines after the
# {{ }} expressions are kept (trim_blocks removes only those after block tags).
ZEPHYR = (
    "{% for message in messages %}\n"
    "{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n"
    "{% endif %}\n"
    "{% endfor %}"
)

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CHATML_SPECIAL = ["<|im_start|>", "<|im_end|>"]

TEMPLATES = {
    "llama3": dict(
        template=LLAMA3, bos="<|begin_of_text|>", eos="<|eot_id|>", special=LLAMA3_SPECIAL,
        system=True, compiles=True,
        note="Meta-Llama-3-8B-Instruct: bos, header + trimmed content + <|eot_id|> for every "
             "role, no default system"),
    "llama3.2": dict(
        template=LLAMA3_2, bos="<|begin_of_text|>", eos="<|eot_id|>", special=LLAMA3_SPECIAL,
        system=True, compiles=True,
        note="Llama-3.2-Instruct (3.1's less built-in tools): system block always written with "
             "cutoff and today's date (strftime_now), empty default system, tools logic kept"),
    "qwen2.5": dict(
        template=QWEN2_5, bos=None, eos="<|im_end|>",
        special=CHATML_SPECIAL + ["<tool_call>", "</tool_call>"],
        system=True, compiles=True,
        note="Qwen2.5-Instruct: ChatML, default system 'You are Qwen, created by Alibaba "
             "Cloud. ...', contents untrimmed, tool branches"),
    "chatml": dict(
        template=CHATML, bos=None, eos="<|im_end|>", special=CHATML_SPECIAL,
        system=True, compiles=True,
        note="plain ChatML of many fine-tunes (OpenHermes style): no default system, no bos"),
    "smollm2": dict(
        template=SMOLLM2, bos="<|im_start|>", eos="<|im_end|>", special=CHATML_SPECIAL,
        system=True, compiles=True,
        note="SmolLM2-Instruct: ChatML with a default system message; its tokenizer's bos is "
             "<|im_start|>, which the template never writes as bos_token"),
    "qwen3": dict(
        template=QWEN3, bos=None, eos="<|im_end|>",
        special=CHATML_SPECIAL + ["<think>", "</think>", "<tool_call>", "</tool_call>",
                                  "<tool_response>", "</tool_response>"],
        system=True, compiles=True,
        note="Qwen3 hybrid thinking: no default system, earlier turns' <think> reasoning "
             "dropped, a final assistant turn gets a think block, enable_thinking=false adds an "
             "empty one to the generation prompt"),
    "gemma": dict(
        template=GEMMA, bos="<bos>", eos="<eos>",
        special=["<bos>", "<start_of_turn>", "<end_of_turn>"],
        system=False, compiles=True,
        note="Gemma 1.1 / Gemma 2 it: bos, assistant as 'model', contents trimmed, a system "
             "message or two turns of a role in a row raise"),
    "gemma3": dict(
        template=GEMMA3, bos="<bos>", eos="<eos>",
        special=["<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>"],
        system=True, compiles=False,
        note="Gemma 3 it: Gemma 2's turns, the system message written (untrimmed, + blank line) "
             "inside the first user turn"),
    "mistral-v0.1": dict(
        template=MISTRAL_V0_1, bos="<s>", eos="</s>", special=["<s>", "</s>"],
        system=False, compiles=True,
        note="Mistral-7B-Instruct v0.1/v0.2: bos, '[INST] ' + content + ' [/INST]', answers "
             "+ eos, system raises, no generation prompt"),
    "mistral-v0.3": dict(
        template=MISTRAL_V0_3, bos="<s>", eos="</s>",
        special=["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
        system=True, compiles=False,
        note="Mistral-7B-Instruct v0.3: system message + blank line moved into the last user "
             "message, answers ' ' + trimmed + eos, tool calls and results"),
    "llama2": dict(
        template=LLAMA2, bos="<s>", eos="</s>", special=["<s>", "</s>"],
        system=True, compiles=False,
        note="Llama-2-chat: <s>[INST] stripped content [/INST], answers ' ' + stripped + ' </s>', "
             "system in a <<SYS>> block inside the first user message"),
    "phi3": dict(
        template=PHI3, bos="<s>", eos="<|endoftext|>",
        special=["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
        system=True, compiles=False,
        note="Phi-3-mini-4k-instruct (July 2024): <|role|>\\n content <|end|>\\n; without a "
             "generation prompt the template ends with eos_token instead"),
    "phi3-early": dict(
        template=PHI3_EARLY, bos="<s>", eos="<|endoftext|>",
        special=["<s>", "<|user|>", "<|assistant|>", "<|end|>"],
        system=False, compiles=False,
        note="Phi-3-mini-4k-instruct (April 2024): <|assistant|> tag after every user message, "
             "add_generation_prompt ignored, system messages silently dropped"),
    "zephyr": dict(
        template=ZEPHYR, bos="<s>", eos="</s>",
        special=["</s>", "<|system|>", "<|user|>", "<|assistant|>"],
        system=True, compiles=True,
        note="zephyr-7b-beta / TinyLlama-Chat: <|role|>\\n content eos \\n, generation prompt "
             "<|assistant|>\\n; multi-line template relying on trim_blocks"),
}

LONG = " ".join(f"Sentence {i} of a long message, with some words and numbers ({i * 37})."
                for i in range(120))

CONVERSATIONS = [
    # one user turn
    [{"role": "user", "content": "Hello!"}],
    # system + user
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "What is 2 + 2?"}],
    # multi-turn
    [{"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "Another one?"}],
    # system + three user turns with the assistant's between them
    [{"role": "system", "content": "Answer in one word."},
     {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris."},
     {"role": "user", "content": "Of Japan?"},
     {"role": "assistant", "content": "Tokyo."},
     {"role": "user", "content": "Of Italy?"}],
    # white space at the ends of contents, newlines inside them
    [{"role": "system", "content": "\n  Be helpful.  \n"},
     {"role": "user", "content": "  padded both ends \n"},
     {"role": "assistant", "content": "\n\nline one\nline two\n\n"},
     {"role": "user", "content": "\tlast\ttabs\t\n"}],
    # Unicode
    [{"role": "user", "content": "Café, naïve, résumé: é è ê."},
     {"role": "assistant", "content": "日本語のテキスト 日本 🙂"},
     {"role": "user", "content": "Emoji 🎉👍🏽 and 中文 and Ελληνικά"}],
    # text that looks like markup or template code
    [{"role": "system", "content": "Keep {{ x }} and {% if %} as they are."},
     {"role": "user", "content": "<b>bold</b> & \"quotes\" 'single' {{ x }} {% if %}"},
     {"role": "assistant", "content": "{% endif %} {# not a comment #} <|im_end|-ish> </s-ish>"},
     {"role": "user", "content": "{{ bos_token }} {%- raw %} \\n \\\\ "}],
    # an empty assistant content
    [{"role": "user", "content": "Say nothing."},
     {"role": "assistant", "content": ""},
     {"role": "user", "content": "Thanks."}],
    # a long content
    [{"role": "system", "content": "Summarize."},
     {"role": "user", "content": LONG}],
]

// cpu_cuda/rewrite.cpp: the one source change the CPU runtime needs, made by the build.
//
//     rewrite SOURCE [OUTPUT]      (OUTPUT defaults to standard output)
//
// g++ compiles CUDA C++ once three constructs are rewritten:
//   kernel<<<grid, block, smem, stream>>>(args)
//       -> ::cpu_cuda::launch_config("kernel", CPU_CUDA_KERNEL(kernel), grid, block, smem, stream)(args)
//       (exec.h runs it; each thread calls the kernel as a function; a kernel named with
//       explicit template arguments, k<T><<<...>>>, is passed as itself instead, so it must
//       give them all)
//   __shared__ T a[N], b[M];    (inside a function)
//       -> static thread_local T a[N], b[M]; ::cpu_cuda::shared_touch(&a, sizeof a); ...
//       (one copy per OS thread = per block, filled with NaN bytes when a block starts)
//   extern __shared__ T buf[];   (or extern T __shared__ buf[];)
//       -> T* buf = (T*)::cpu_cuda::dynamic_shared();
//   extern __shared__ T tile[][33];
//       -> T(*tile)[33] = (T(*)[33])::cpu_cuda::dynamic_shared();
//   cudaLaunchCooperativeKernel((void*)k, grid, block, args, smem, stream)   (in a function)
//       -> ::cpu_cuda::cooperative_launch("k", k, grid, block, args, smem, stream)
//       and cudaLaunchKernel(...) -> ::cpu_cuda::kernel_launch("k", k, ...): the kernel's own
//       type, which a cast to void* has lost, tells the runtime its parameters (runtime.h)
//   (void*)k  (a kernel declared above, cast as a whole operand)
//       -> ::cpu_cuda::kernel_address("k", k): the same address, its type remembered, so that
//       cudaLaunchKernel with a void* variable and a graph's kernel node can launch it
//   #pragma unroll N  -> #pragma GCC unroll N   (g++ warns about CUDA's spelling)
//   asm("mov.u32 %0, %%laneid;" : "=r"(x))  -> ((x) = ::cpu_cuda::ptx_sreg_laneid())
//       (reads of the special registers laneid, warpid and lanemask_*; other asm is kept)
//   __global__ void __launch_bounds__(256) k(float* x) { ...
//       -> __global__ void  k(float* x) { ::cpu_cuda::kernel_entry("k", __FILE__, __LINE__, 256); ...
//       (every kernel's body starts with kernel_entry: it fails a launch beyond the launch
//       bounds, and a kernel called from host code as a function, with a message)
// Comments, string and character literals are skipped (a literal may continue on the next line
// after a backslash, as the preprocessor's line splicing allows). No line is added or removed, and
// the output starts with #line 1 "SOURCE", so compiler errors and gdb name the real file
// and line. A .cu file's output opens the namespace of device functions that nvcc shows to .cu
// files only (device_math.h's umin and its kin) before that line; a .cpp's does not.
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& file, int line, const std::string& why) {
    fprintf(stderr, "%s:%d: cpu_cuda rewrite: %s\n", file.c_str(), line, why.c_str());
    exit(1);
}

bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

class Rewriter {
  public:
    Rewriter(std::string path, std::string text) : path_(std::move(path)), s_(std::move(text)) {}

    std::string run() {
        out_ = "#line 1 \"" + path_ + "\"\n";
        // a .cu file sees the device functions that nvcc shows .cu files only (device_math.h);
        // a .cpp or header does not (a header included by a .cu sees them through it)
        if (path_.size() > 3 && path_.compare(path_.size() - 3, 3, ".cu") == 0)
            out_ = "using namespace ::cpu_cuda::device_functions;\n" + out_;
        bool line_start = true;
        while (i_ < s_.size()) {
            char c = s_[i_];
            if (c == '\n') {
                line_++;
                out_ += c, i_++;
                line_start = true;
                continue;
            }
            if (line_start && c == '#') {
                directive();
                continue;
            }
            if (!isspace((unsigned char)c)) line_start = false;
            bool digit_separator = c == '\'' && i_ > 0 && isalnum((unsigned char)s_[i_ - 1]);  // 1'000
            if (starts("//") || starts("/*") || c == '"' || (c == '\'' && !digit_separator) || raw_string_start()) {
                size_t end = skip_literal_or_comment(i_);
                copy_to(end);
                continue;
            }
            if (kernel_.pending) {
                if (c == '(') kernel_.parens++, kernel_.seen_params = true;
                if (c == ')') kernel_.parens--;
                if (c == '<' && !kernel_.seen_params) kernel_.angles++;
                if (c == '>' && !kernel_.seen_params && kernel_.angles > 0) kernel_.angles--;
                if (c == ';' && kernel_.parens == 0) {  // a declaration: nothing to check
                    if (kernel_.seen_params) kernels_.insert(kernel_.name);
                    kernel_ = {};
                }
                if (c == '{' && kernel_.parens == 0 && kernel_.seen_params) {
                    kernels_.insert(kernel_.name);
                    out_ += "{ ::cpu_cuda::kernel_entry(\"" + kernel_.name + "\", __FILE__, __LINE__" +
                            (kernel_.bounds.empty() ? "" : ", " + kernel_.bounds) + ");";
                    kernel_ = {};
                    depth_++, i_++;
                    continue;
                }
            }
            if (c == '{') depth_++;
            if (c == '}') depth_--;
            if (starts("<<<")) {
                launch();
                continue;
            }
            if (c == '(' && depth_ > 0 && kernel_address())
                continue;
            if (ident_char(c) && (i_ == 0 || !ident_char(s_[i_ - 1]))) {
                size_t end = i_;
                while (end < s_.size() && ident_char(s_[end])) end++;
                std::string word = s_.substr(i_, end - i_);
                if (word == "__shared__" && depth_ > 0) {
                    shared(end);
                    continue;
                }
                if (word == "__global__") {  // (keeping launch bounds written before it)
                    std::string bounds = kernel_.bounds;
                    kernel_ = {}, kernel_.pending = true, kernel_.bounds = bounds;
                }
                if (word == "__launch_bounds__") {
                    launch_bounds(end);
                    continue;
                }
                if ((word == "cudaLaunchCooperativeKernel" || word == "cudaLaunchKernel") && depth_ > 0 &&
                    array_launch(word, end))
                    continue;
                if ((word == "asm" || word == "__asm__" || word == "__asm") && depth_ > 0 && special_register(end))
                    continue;
                if (kernel_.pending && !kernel_.seen_params && kernel_.angles == 0 && word != "__global__")
                    kernel_.name = word;  // the last name before the parameters
                out_ += word;
                i_ = end;
                continue;
            }
            out_ += c, i_++;
        }
        return out_;
    }

  private:
    std::string path_, s_, out_;
    size_t i_ = 0;
    int line_ = 1, depth_ = 0;
    std::set<std::string> kernels_;  // the __global__ functions declared so far
    struct Kernel {  // a __global__ function being read, up to its body
        bool pending = false, seen_params = false;
        int parens = 0, angles = 0;
        std::string name, bounds;
    } kernel_;

    // __launch_bounds__(args): removed here (its line breaks kept), the arguments handed to
    // the kernel's kernel_entry.
    void launch_bounds(size_t word_end) {
        size_t open = word_end;
        while (open < s_.size() && isspace((unsigned char)s_[open])) open++;
        if (open >= s_.size() || s_[open] != '(') die(path_, line_, "__launch_bounds__ without its '('");
        size_t close = find_top_level(open + 1, ")");
        if (close == std::string::npos) die(path_, line_, "__launch_bounds__( without its ')'");
        for (size_t k = i_; k < close; k++)
            if (s_[k] == '\n') out_ += '\n', line_++;
        for (size_t k = open + 1; k < close; k++) kernel_.bounds += s_[k] == '\n' ? ' ' : s_[k];
        i_ = close + 1;
    }

    bool starts(const char* t) const { return s_.compare(i_, strlen_(t), t) == 0; }
    static size_t strlen_(const char* t) { return std::char_traits<char>::length(t); }

    void copy_to(size_t end) {
        for (; i_ < end; i_++) {
            if (s_[i_] == '\n') line_++;
            out_ += s_[i_];
        }
    }

    // R"delim( ... )delim", possibly with an encoding prefix (u8R, LR, ...)
    bool raw_string_start() const {
        size_t j = i_;
        if (j > 0 && ident_char(s_[j - 1])) return false;
        while (j < s_.size() && (s_[j] == 'u' || s_[j] == '8' || s_[j] == 'U' || s_[j] == 'L')) j++;
        return j + 1 < s_.size() && s_[j] == 'R' && s_[j + 1] == '"';
    }

    // The index just past the comment or literal starting at j.
    size_t skip_literal_or_comment(size_t j) const {
        if (s_.compare(j, 2, "//") == 0) {
            while (j < s_.size() && s_[j] != '\n') {
                if (s_[j] == '\\' && j + 1 < s_.size() && s_[j + 1] == '\n') j++;  // continued comment
                j++;
            }
            return j;
        }
        if (s_.compare(j, 2, "/*") == 0) {
            size_t end = s_.find("*/", j + 2);
            if (end == std::string::npos) die(path_, line_, "unterminated comment");
            return end + 2;
        }
        if (s_[j] != '"' && s_[j] != '\'') {  // raw string
            size_t quote = s_.find('"', j);
            size_t paren = s_.find('(', quote);
            std::string close = ")" + s_.substr(quote + 1, paren - quote - 1) + "\"";
            size_t end = s_.find(close, paren);
            if (end == std::string::npos) die(path_, line_, "unterminated raw string");
            return end + close.size();
        }
        char quote = s_[j++];
        while (j < s_.size() && s_[j] != quote) {
            if (s_[j] == '\\') {  // an escape, or a backslash-newline that continues the literal
                j += s_.compare(j + 1, 2, "\r\n") == 0 ? 3 : 2;
                continue;
            }
            if (s_[j] == '\n') die(path_, line_, "unterminated literal");
            j++;
        }
        return j + 1;
    }

    // A preprocessor line (with its continuations): copied, except #pragma unroll.
    void directive() {
        size_t end = i_;
        while (end < s_.size() && s_[end] != '\n') {
            if (s_[end] == '\\' && end + 1 < s_.size() && s_[end + 1] == '\n') end++;
            end++;
        }
        std::string text = s_.substr(i_, end - i_);
        std::istringstream words(text.substr(1));
        std::string pragma, unroll, count;
        words >> pragma >> unroll >> count;
        if (pragma == "pragma" && unroll == "unroll") {
            bool literal = !count.empty() && count.find_first_not_of("0123456789") == std::string::npos;
            out_ += literal ? "#pragma GCC unroll " + count : "// (cpu_cuda) " + text;
            i_ = end;
            return;
        }
        copy_to(end);
    }

    // The index of the first top-level occurrence of `stop` from j, skipping literals,
    // comments and bracketed groups; npos if none before the end.
    size_t find_top_level(size_t j, const std::string& stop) const {
        int nest = 0;
        while (j < s_.size()) {
            char c = s_[j];
            bool digit_separator = c == '\'' && j > 0 && isalnum((unsigned char)s_[j - 1]);
            if (s_.compare(j, 2, "//") == 0 || s_.compare(j, 2, "/*") == 0 || c == '"' || (c == '\'' && !digit_separator)) {
                j = skip_literal_or_comment(j);
                continue;
            }
            if (nest == 0 && s_.compare(j, stop.size(), stop) == 0) return j;
            if (c == '(' || c == '[' || c == '{') nest++;
            if (c == ')' || c == ']' || c == '}') {
                if (nest == 0) return std::string::npos;
                nest--;
            }
            j++;
        }
        return std::string::npos;
    }

    // Where the kernel expression just emitted before "<<<" starts: a name, maybe qualified,
    // maybe with template arguments.
    size_t kernel_start(size_t end) const {
        size_t j = end;
        if (j > 0 && out_[j - 1] == '>') {
            int angle = 0;
            while (j > 0) {
                char c = out_[--j];
                if (c == '>') angle++;
                if (c == '<' && --angle == 0) break;
            }
        }
        while (j > 0 && (ident_char(out_[j - 1]) || out_[j - 1] == ':')) j--;
        return j;
    }

    // cudaLaunchCooperativeKernel(FIRST, rest) / cudaLaunchKernel(FIRST, rest): FIRST without a
    // cast to void* (or const void*) and without &, named and passed as itself. False (nothing
    // done) when the word is not followed by a call with arguments.
    // asm("mov.u32 %0, %%laneid;" : "=r"(x)): a read of one of PTX's special registers that
    // the runtime knows (laneid, warpid, lanemask_eq/lt/le/ge/gt) becomes
    // (x) = ::cpu_cuda::ptx_sreg_NAME(); any other asm is left for the assembler to refuse.
    bool special_register(size_t word_end) {
        size_t open = word_end;
        auto skip_space = [&] {
            while (open < s_.size() && isspace((unsigned char)s_[open])) open++;
        };
        skip_space();
        for (const char* q : {"volatile", "__volatile__"})
            if (s_.compare(open, strlen_(q), q) == 0 && !ident_char(s_[open + strlen_(q)])) open += strlen_(q), skip_space();
        if (open >= s_.size() || s_[open] != '(') return false;
        size_t close = find_top_level(open + 1, ")");
        if (close == std::string::npos) return false;
        std::string inside = s_.substr(open + 1, close - open - 1);
        int newlines = 0;
        for (char& c : inside)
            if (c == '\n') c = ' ', newlines++;
        static const std::regex read(
            R"re(^\s*"\s*mov\.u32\s+%0\s*,\s*%%(laneid|warpid|lanemask_eq|lanemask_lt|lanemask_le|lanemask_ge|lanemask_gt)\s*;?\s*"\s*:\s*"=r"\s*\((.*)\)\s*$)re");
        std::smatch m;
        if (!std::regex_match(inside, m, read)) return false;
        out_ += "((" + m[2].str() + ") = ::cpu_cuda::ptx_sreg_" + m[1].str() + "())";
        out_ += std::string(newlines, '\n');
        line_ += newlines;
        i_ = close + 1;
        return true;
    }

    // (void*)k, (const void*)&k or (void*)k<T>, of a kernel declared above, as a whole operand
    // (followed by ; , ) or }): ::cpu_cuda::kernel_address("k", k), the same address, with the
    // kernel's type remembered, so that a launch from the void* (cudaLaunchKernel with a
    // variable, a graph's kernel node) knows its parameters.
    bool kernel_address() {
        static const std::regex cast(R"(^\(\s*(const\s+)?void\s*\*\s*\)\s*&?\s*([A-Za-z_]\w*)(\s*<[^<>;()]*>)?(\s*)[;,)}])");
        std::smatch m;
        const size_t line_end = std::min(s_.find('\n', i_), s_.size());
        const std::string window = s_.substr(i_, line_end - i_);
        if (!std::regex_search(window, m, cast) || !kernels_.count(m[2].str())) return false;
        const std::string name = m[2].str() + m[3].str();
        out_ += "::cpu_cuda::kernel_address(\"" + name + "\", " + name + ")" + m[4].str();
        i_ += m.length(0) - 1;  // (the terminator is read as usual)
        return true;
    }

    bool array_launch(const std::string& word, size_t word_end) {
        size_t open = word_end;
        while (open < s_.size() && (s_[open] == ' ' || s_[open] == '\t')) open++;
        if (open >= s_.size() || s_[open] != '(') return false;
        size_t comma = open + 1;
        for (int depth = 0; comma < s_.size(); comma++) {
            char c = s_[comma];
            if (c == '(' || c == '[' || c == '{') depth++;
            else if (c == ')' || c == ']' || c == '}') {
                if (depth-- == 0) return false;
            } else if (c == ',' && depth == 0) break;
        }
        if (comma >= s_.size()) return false;
        std::string first = s_.substr(open + 1, comma - open - 1), newlines;
        for (char& c : first)
            if (c == '\n') newlines += '\n', c = ' ';
        static const std::regex c_cast(R"(^\s*\(\s*(const\s+)?void\s*\*\s*\)\s*&?\s*(.*?)\s*$)");
        static const std::regex cpp_cast(R"(^\s*(reinterpret|static)_cast\s*<\s*(const\s+)?void\s*\*\s*>\s*\(\s*&?\s*(.*?)\s*\)\s*$)");
        static const std::regex plain(R"(^\s*&?\s*(.*?)\s*$)");
        std::smatch m;
        std::string name = std::regex_match(first, m, c_cast)     ? m[2].str()
                         : std::regex_match(first, m, cpp_cast) ? m[3].str()
                         : std::regex_match(first, m, plain)    ? m[1].str()
                                                                : first;
        if (out_.size() >= 2 && out_.compare(out_.size() - 2, 2, "::") == 0) out_.resize(out_.size() - 2);
        std::string quoted;
        for (char c : name) quoted += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
        out_ += std::string("::cpu_cuda::") + (word == "cudaLaunchKernel" ? "kernel_launch" : "cooperative_launch") +
                "(\"" + quoted + "\", " + name + newlines;
        line_ += (int)newlines.size();
        i_ = comma;
        return true;
    }

    void launch() {
        int start_line = line_;
        size_t close = find_top_level(i_ + 3, ">>>");
        if (close == std::string::npos) die(path_, start_line, "a '<<<' without its '>>>'");
        size_t end = out_.size();
        while (end > 0 && isspace((unsigned char)out_[end - 1])) end--;
        size_t start = kernel_start(end);
        if (start == end) die(path_, start_line, "no kernel name before '<<<'");
        std::string kernel, name, moved = out_.substr(start);
        for (size_t k = start; k < end; k++) {
            char c = out_[k] == '\n' || out_[k] == '\t' ? ' ' : out_[k];
            kernel += c;
            if (c == '"' || c == '\\') name += '\\';
            name += c;
        }
        out_.resize(start);
        for (char c : moved)  // the kernel moves into the call; its line breaks stay here
            if (c == '\n') out_ += c;
        // k<T, 4><<<...>>> names one function (all its template arguments given): passed as itself
        bool explicit_arguments = kernel.back() == '>';
        out_ += "::cpu_cuda::launch_config(\"" + name + "\", " +
                (explicit_arguments ? kernel : "CPU_CUDA_KERNEL(" + kernel + ")") + ", ";
        i_ += 3;
        copy_to(close);  // the launch configuration, newlines and all
        out_ += ")";
        i_ = close + 3;
    }

    // The declarator names in "T a[N], b[M]" (the text between __shared__ and ';').
    std::vector<std::string> declarator_names(const std::string& decl, std::string* type) const {
        std::vector<std::string> pieces;
        int nest = 0, angle = 0;
        size_t from = 0;
        for (size_t k = 0; k < decl.size(); k++) {
            char c = decl[k];
            if (c == '(' || c == '[') nest++;
            if (c == ')' || c == ']') nest--;
            if (nest == 0 && c == '<') angle++;
            if (nest == 0 && c == '>') angle--;
            if (nest == 0 && angle == 0 && c == ',') pieces.push_back(decl.substr(from, k - from)), from = k + 1;
        }
        pieces.push_back(decl.substr(from));
        std::vector<std::string> names;
        for (size_t p = 0; p < pieces.size(); p++) {
            std::string piece = pieces[p];
            size_t cut = piece.find_first_of("[=");  // the name ends before its dimensions
            size_t end = cut == std::string::npos ? piece.size() : cut;
            while (end > 0 && !ident_char(piece[end - 1])) end--;
            size_t begin = end;
            while (begin > 0 && ident_char(piece[begin - 1])) begin--;
            if (begin == end) die(path_, line_, "cannot read the name in this __shared__ declaration");
            names.push_back(piece.substr(begin, end - begin));
            if (p == 0 && type) *type = piece.substr(0, begin);
        }
        return names;
    }

    static std::string strip_alignment(std::string type) {  // __align__(16) and alignas(16)
        for (const char* attr : {"__align__", "alignas"}) {
            size_t at;
            while ((at = type.find(attr)) != std::string::npos) {
                size_t close = type.find(')', at);
                type.erase(at, close == std::string::npos ? std::string::npos : close + 1 - at);
            }
        }
        return type;
    }

    void shared(size_t word_end) {
        size_t semi = find_top_level(word_end, ";");
        if (semi == std::string::npos) die(path_, line_, "a __shared__ declaration without its ';'");
        std::string decl = s_.substr(word_end, semi - word_end);
        int newlines = 0;
        for (char c : decl) newlines += c == '\n';
        // what was emitted just before: "extern " makes it dynamic, "static " is kept
        size_t back = out_.size();
        while (back > 0 && isspace((unsigned char)out_[back - 1])) back--;
        auto preceded_by = [&](const std::string& w) {
            return back >= w.size() && out_.compare(back - w.size(), w.size(), w) == 0 &&
                   (back == w.size() || !ident_char(out_[back - w.size() - 1]));
        };
        // "extern float __shared__ s[]": the qualifier after the type; the words back to the
        // statement's start are the type, and "extern" leads them
        std::string type_before;
        size_t st = back;
        while (st > 0 && (ident_char(out_[st - 1]) || out_[st - 1] == ' ' || out_[st - 1] == '\t' || out_[st - 1] == ':'))
            st--;
        while (st < back && isspace((unsigned char)out_[st])) st++;
        bool extern_first = !preceded_by("extern") && out_.compare(st, 6, "extern") == 0 && st + 6 < back &&
                            !ident_char(out_[st + 6]);
        if (extern_first) {
            type_before = out_.substr(st + 6, back - st - 6) + " ";
            out_.resize(st + 6), back = st + 6;
        }
        if (preceded_by("extern")) {
            out_.resize(back - 6);
            std::string type;
            std::vector<std::string> names = declarator_names(decl, &type);
            type = strip_alignment(type_before + type);
            // the dimensions after the first, unknown one: extern __shared__ float s[][33]
            // is a pointer to rows of 33
            size_t name_at = decl.find(names[0]);
            size_t open = decl.find('[', name_at);
            size_t close = open == std::string::npos ? open : decl.find(']', open);
            std::string rows = close == std::string::npos ? "" : decl.substr(close + 1);
            while (!rows.empty() && isspace((unsigned char)rows.back())) rows.pop_back();
            for (char& c : rows)
                if (c == '\n') c = ' ';
            if (rows.empty())
                out_ += type + "* " + names[0] + " = (" + type + "*)::cpu_cuda::dynamic_shared();";
            else
                out_ += type + "(*" + names[0] + ")" + rows + " = (" + type + "(*)" + rows +
                        ")::cpu_cuda::dynamic_shared();";
        } else {
            // "__shared__ alignas(16) float t[N]": alignas may only lead the declaration, so it
            // goes before "static thread_local"
            std::string lead, body = decl;
            size_t k = body.find_first_not_of(" \t\n");
            if (!preceded_by("static") && k != std::string::npos && body.compare(k, 7, "alignas") == 0 &&
                (k + 7 == body.size() || !ident_char(body[k + 7]))) {
                size_t e = body.find('(', k);
                for (int depth = 0; e != std::string::npos && e < body.size(); e++)
                    if (body[e] == '(') depth++;
                    else if (body[e] == ')' && --depth == 0) break;
                if (e == std::string::npos || e >= body.size()) die(path_, line_, "cannot read this alignas(...)");
                lead = body.substr(k, e + 1 - k) + " ";
                for (char& c : lead)
                    if (c == '\n') c = ' ';
                body = body.substr(e + 1);
            }
            std::vector<std::string> names = declarator_names(body, nullptr);
            out_ += lead + (preceded_by("static") ? "thread_local" : "static thread_local");
            for (char c : body)
                if (c != '\n') out_ += c;
            out_ += ";";
            for (const std::string& n : names) out_ += " ::cpu_cuda::shared_touch(&" + n + ", sizeof " + n + ");";
        }
        out_ += std::string(newlines, '\n');
        line_ += newlines;
        i_ = semi + 1;
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s SOURCE [OUTPUT]\n", argv[0]);
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        fprintf(stderr, "%s: cannot read '%s'\n", argv[0], argv[1]);
        return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string result = Rewriter(argv[1], text.str()).run();
    if (argc == 3) {
        std::string tmp = std::string(argv[2]) + ".tmp";
        std::ofstream out(tmp, std::ios::binary);
        out << result;
        if (!out.flush() || std::rename(tmp.c_str(), argv[2]) != 0) {
            fprintf(stderr, "%s: cannot write '%s'\n", argv[0], argv[2]);
            return 1;
        }
    } else {
        std::cout << result;
    }
    return 0;
}
